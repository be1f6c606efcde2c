"""A private PostgreSQL 18 + pgvector server for development and tests (see README.md)."""

from infra.postgres.embedded import EmbeddedPostgres

__all__ = ["EmbeddedPostgres"]
