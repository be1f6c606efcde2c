"""The one idempotent insert every handler uses: a row whose key exists already is left as it is."""

from __future__ import annotations

from sqlalchemy import Connection, Table
from sqlalchemy.dialects.postgresql import insert


def insert_new(conn: Connection, table: Table, rows: list[dict], returning: bool = False) -> list:
    """Insert `rows`, skipping any whose key exists (a repeated event, a second create of the same entity).

    With `returning`, the keys of the rows actually inserted, so a caller can tell a repeat from a first time.
    """
    if not rows:
        return []
    stmt = insert(table).on_conflict_do_nothing()
    if not returning:
        conn.execute(stmt, rows)
        return []
    return conn.execute(stmt.returning(*table.primary_key.columns), rows).all()
