"""Counting what the API reads from Postgres: a test of a read's cost counts rows, not seconds."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import event
from sqlalchemy.engine import Engine


@contextmanager
def rows_read(columns: set[str]) -> Iterator[list[int]]:
    """The number of rows each statement run meanwhile returned, of those whose results hold all of `columns`
    (the API runs in the test's process, so its statements are seen here)."""
    read: list[int] = []

    def count(conn, cursor, statement, parameters, context, executemany):
        if columns <= {d[0] for d in cursor.description or ()}:
            read.append(cursor.rowcount)

    event.listen(Engine, "after_cursor_execute", count)
    try:
        yield read
    finally:
        event.remove(Engine, "after_cursor_execute", count)
