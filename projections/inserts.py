"""Bulk inserts: the idempotent insert every handler uses, and COPY on the caller's transaction.

A row whose key exists already is left as it is. Up to BULK_ROWS rows go through executemany (one
INSERT per row, pipelined); above it, through COPY into a per-connection staging table and one
`INSERT ... SELECT ... ON CONFLICT DO NOTHING` in the rows' order, so the first of two rows with one key
wins either way and a batch projects to the same rows whatever its size (a rebuild replays in bigger
batches than the live projector applies). Building one parameter set per row through SQLAlchemy was
most of a rebuild's time in the observation tables. `upsert_latest` takes the same two paths for rows
that replace an older version of themselves.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import orjson
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.types.json import Jsonb
from sqlalchemy import Connection, Table
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, IntegrityError

from projections.db import mapped_schema
from projections.keys import text_array_literal

BULK_ROWS = 100
_NOTHING = sql.SQL("DO NOTHING")


def insert_new(conn: Connection, table: Table, rows: list[dict], returning: bool = False) -> list:
    """Insert `rows`, skipping any whose key exists (a repeated event, a second create of the same entity).

    With `returning`, the keys of the rows actually inserted, so a caller can tell a repeat from a first time.
    """
    if not rows:
        return []
    if not returning and len(rows) > BULK_ROWS:
        _copy_or_stage(conn, table, rows)
        return []
    stmt = insert(table).on_conflict_do_nothing()
    if not returning:
        conn.execute(stmt, rows)
        return []
    return conn.execute(stmt.returning(*table.primary_key.columns), rows).all()


def copy_in(conn: Connection, table: Table, rows: list[dict], into: sql.Composable | None = None) -> None:
    """COPY `rows` (dicts with the same keys) into `table`, or into the relation `into` with its columns,
    on the caller's connection and transaction. Errors surface as SQLAlchemy's DBAPIError subclasses,
    as from conn.execute, so apply_batch's fallback (one by one, quarantine) works unchanged.

    In COPY's binary form: a vector goes as 384 packed floats, not as ~3.5 kB of decimals that psycopg
    escapes and Postgres parses again (20,000 observation rows: 12 instead of 45 µs a row end to end,
    tests/bench/README.md)."""
    if not rows:
        return
    columns = list(rows[0])
    raw = conn.connection.driver_connection
    _know_vectors(raw)
    wrap = [_json if isinstance(table.c[c].type, JSONB) else None for c in columns]
    names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    stmt = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(into or _target(conn, table), names)
    with _as_dbapi_error(raw, stmt), raw.cursor() as cursor, cursor.copy(stmt) as copy:
        copy.set_types(_copy_types(conn.dialect, table, tuple(columns)))
        for row in rows:
            copy.write_row([row[c] if w is None else w(row[c]) for c, w in zip(columns, wrap)])


def take(conn: Connection, table: Table, keys: list[tuple[str, str]], columns: list[str]) -> list[tuple]:
    """Delete the rows of `table` whose two-column primary key is among `keys`, and return their `columns`
    in Postgres's binary form: a vector as pgvector's Vector, ready for copy_in, not text to parse."""
    raw = conn.connection.driver_connection
    _know_vectors(raw)
    first, second = (sql.Identifier(c.name) for c in table.primary_key.columns)
    stmt = sql.SQL(
        "DELETE FROM {} t USING unnest(%s::text[], %s::text[]) AS k(a, b) WHERE t.{} = k.a AND t.{} = k.b RETURNING {}"
    ).format(_target(conn, table), first, second, sql.SQL(", ").join(sql.Identifier("t", c) for c in columns))
    with _as_dbapi_error(raw, stmt), raw.cursor(binary=True) as cursor:
        cursor.execute(stmt, (text_array_literal([a for a, _ in keys]), text_array_literal([b for _, b in keys])))
        return cursor.fetchall()


def _copy_or_stage(conn: Connection, table: Table, rows: list[dict]) -> None:
    """COPY `rows` straight into `table` when none of their keys is there or repeats among them (a first
    projection, a rebuild: nearly always); else, from the savepoint, through the stage, which skips those.
    Straight in, each row is written once, where the stage writes it twice (a 1.5 kB vector included)."""
    try:
        with conn.begin_nested():
            copy_in(conn, table, rows)
    except IntegrityError as exc:
        if not isinstance(exc.orig, psycopg.errors.UniqueViolation):
            raise  # a row the stage would refuse as well (a NULL where none may be): apply_batch sorts it out
        _insert_staged(conn, table, rows)


def _insert_staged(conn: Connection, table: Table, rows: list[dict], on_conflict: sql.Composable = _NOTHING) -> None:
    target, stage = _target(conn, table), sql.Identifier(f"staged_{table.name}")
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in rows[0])
    # every time, not once per connection: a rolled-back transaction takes the table it created with it.
    # LIKE copies columns, NOT NULLs and defaults, not keys: the stage takes any row
    _run(
        conn,
        sql.SQL(
            "CREATE TEMP TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS,"
            " staged_order bigint GENERATED ALWAYS AS IDENTITY) ON COMMIT DELETE ROWS"
        ).format(stage, target),
    )
    copy_in(conn, table, rows, into=stage)
    _run(
        conn,
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ORDER BY staged_order ON CONFLICT {}").format(
            target, columns, columns, stage, on_conflict
        ),
        sql.SQL("DELETE FROM {}").format(stage),  # the stage may serve this table again before the commit
    )


def upsert_latest(conn: Connection, table: Table, rows: list[dict], version: str) -> None:
    """Insert `rows`, or overwrite the row with the same primary key where its `version` column is older:
    the newest version wins, whatever order they come in. A row older than the stored one changes nothing."""
    if not rows:
        return
    key = [c.name for c in table.primary_key.columns]
    if len(rows) <= BULK_ROWS:
        stmt = insert(table)
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=key,
                set_={c: stmt.excluded[c] for c in rows[0] if c not in key},
                where=table.c[version] < stmt.excluded[version],
            ),
            rows,
        )
        return
    newest: dict[tuple, dict] = {}
    for row in rows:  # one INSERT may not touch a row twice: keep each key's newest
        k = tuple(row[c] for c in key)
        if k not in newest or newest[k][version] < row[version]:
            newest[k] = row
    # the existing row goes by its table's bare name (`schema.table` is the insert's target)
    on_conflict = sql.SQL("({}) DO UPDATE SET {} WHERE {}.{} < EXCLUDED.{}").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in key),
        sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in rows[0] if c not in key),
        sql.Identifier(table.name),
        sql.Identifier(version),
        sql.Identifier(version),
    )
    _insert_staged(conn, table, list(newest.values()), on_conflict)


def _run(conn: Connection, *statements: sql.Composable) -> None:
    raw = conn.connection.driver_connection
    with raw.cursor() as cursor:
        for stmt in statements:
            with _as_dbapi_error(raw, stmt):
                cursor.execute(stmt)


@contextmanager
def _as_dbapi_error(raw: psycopg.Connection, stmt: sql.Composable) -> Iterator[None]:
    """psycopg's errors as the DBAPIError subclasses conn.execute raises (apply_batch tells them apart)."""
    try:
        yield
    except psycopg.Error as exc:
        raise DBAPIError.instance(stmt.as_string(raw), None, exc, psycopg.Error) from exc


def _target(conn: Connection, table: Table) -> sql.Composable:
    schema = mapped_schema(conn) or table.schema
    return sql.Identifier(schema, table.name) if schema else sql.Identifier(table.name)


@lru_cache(maxsize=256)
def _copy_types(dialect: Dialect, table: Table, columns: tuple[str, ...]) -> list[str]:
    """The Postgres types psycopg writes the columns' values as: each one's DDL name without modifiers
    ("VECTOR(384)" is "vector", "TIMESTAMP WITH TIME ZONE" "timestamp with time zone"); worked out once
    per table and column list, not at every batch."""
    return [re.sub(r"\(.*?\)", "", table.c[c].type.compile(dialect=dialect)).lower() for c in columns]


def _json(value: Any) -> Jsonb | None:
    # JSON written by orjson (psycopg's own dumps is the stdlib's); jsonb stores the same value either way
    return None if value is None else Jsonb(value, dumps=orjson.dumps)


def _know_vectors(raw: psycopg.Connection) -> None:
    """pgvector's binary dumper on this connection (looked up once: it asks the database for the type)."""
    if raw.adapters.types.get("vector") is None:
        register_vector(raw)
