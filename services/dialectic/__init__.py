"""Dialectic Chat: an LLM tool loop that answers questions about peers from the projections.

policy (pure loop decisions and citations), prompt (versioned text), ports (the reads it needs, which
projections implements), loop (the thin shell that does the I/O); its tools are services/toolloop's memory
tools, its answer schema's checks response_format.
"""
