"""The deriver: batches a pair's perceived messages and extracts explicit observations with a model."""
