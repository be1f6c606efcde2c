"""The tool loop Chat (services/dialectic) and the dream specialists (services/dreamer) share.

registry (a tool: pydantic input → JSON schema → handler; running one call), turns (the structured-mode
turn schemas and the tool catalogue a prompt shows), memory (the memory-reading tools both offer, and the
narrow port, MemoryReads, through which they read the projections).
"""
