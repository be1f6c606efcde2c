"""The embedder: embeds each message and appends the vectors as MessagesEmbedded (hybrid message search)."""
