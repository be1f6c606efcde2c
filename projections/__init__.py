"""Postgres projections of the log: schema, projector, read queries and rebuild."""
