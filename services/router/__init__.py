"""The router: turns each message into the pairs that may perceive it (theory-of-mind scoping)."""
