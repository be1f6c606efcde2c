"""Dialectic Chat: an LLM agent that answers questions about peers from the projections.

policy (pure loop decisions and citations), prompt (versioned text), tools (schemas and executors over
the projections), agent (the thin shell that does the I/O), settings.
"""
