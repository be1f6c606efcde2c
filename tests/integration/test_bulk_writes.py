"""The projector's bulk writes (COPY in binary form, staged) against a real Postgres: every column type
the projections use goes in and comes back as it was written."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    Column,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, TIMESTAMP
from sqlalchemy.exc import IntegrityError

from projections.db import sync_engine
from projections.inserts import BULK_ROWS, insert_new, take
from projections.keys import among
from projections.schema import EMBEDDING_DIMENSIONS
from projections.vectors import Vector

every_type = Table(
    "every_type",
    MetaData(),
    Column("workspace_id", Text, nullable=False),
    Column("item_id", Text, nullable=False),
    Column("n", BigInteger),
    Column("i", Integer),
    Column("flag", Boolean),
    Column("meta", JSONB),
    Column("at", TIMESTAMP(timezone=True)),
    Column("tags", ARRAY(Text)),
    Column("embedding", Vector(EMBEDDING_DIMENSIONS)),
    PrimaryKeyConstraint("workspace_id", "item_id"),
)


def _row(i: int) -> dict:
    return dict(
        workspace_id="w",
        item_id=f'item {i} \t\\ "quoted" ünïcode',  # what COPY's text form had to escape
        n=2**40 + i,
        i=i,
        flag=i % 2 == 0,
        meta={"i": i, "nested": {"list": [1, "two", None]}, "text": "line\nbreak"} if i % 3 else None,
        at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i),
        tags=["a", f"t{i}"] if i % 4 else [],
        embedding=[(i + d) / 1024 for d in range(EMBEDDING_DIMENSIONS)] if i % 5 else None,
    )


@contextmanager
def _empty_table(settings) -> Iterator:
    """A connection, in one transaction, to the test schema with `every_type` created there and empty."""
    schema = settings.database.schema_name
    engine = sync_engine(settings.database)
    try:
        with engine.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
            mapped = conn.execution_options(schema_translate_map={None: schema})
            every_type.create(mapped, checkfirst=True)
            mapped.execute(every_type.delete())
            yield mapped
    finally:
        engine.dispose()


def test_a_bulk_insert_and_a_take_return_every_column_type_as_written(settings):
    table = every_type
    with _empty_table(settings) as mapped:
        rows = [_row(i) for i in range(BULK_ROWS + 50)]  # past BULK_ROWS: the COPY path
        insert_new(mapped, table, rows + rows[:10])  # a repeated key is skipped, not an error
        stored = mapped.execute(select(table).order_by(table.c.i)).mappings().all()
        taken = take(mapped, table, [("w", rows[6]["item_id"])], ["item_id", "meta", "embedding"])
        left = mapped.execute(select(table.c.item_id)).scalars().all()
    assert len(stored) == len(rows)
    for got, want in zip(stored, rows):
        vector = got["embedding"]
        assert {**got, "embedding": None} == {**want, "embedding": None}
        assert (vector is None) == (want["embedding"] is None)
        if vector is not None:  # k / 1024 is exact in float4 too
            assert [float(x) for x in vector] == want["embedding"]
    [(item_id, meta, vector)] = taken
    assert (item_id, meta) == (rows[6]["item_id"], rows[6]["meta"])
    assert [float(x) for x in vector.to_list()] == rows[6]["embedding"]
    assert rows[6]["item_id"] not in left and len(left) == len(rows) - 1


def test_a_bulk_insert_over_rows_already_there_keeps_them_as_first_written_and_adds_the_rest(settings):
    with _empty_table(settings) as mapped:
        first = [_row(i) for i in range(BULK_ROWS + 1)]
        insert_new(mapped, every_type, first)  # straight into the empty table
        again = [{**r, "n": -1} for r in first[:20]] + [_row(i) for i in range(BULK_ROWS + 1, 2 * BULK_ROWS)]
        insert_new(mapped, every_type, again)  # 20 keys exist: the straight COPY fails, the stage skips them
        stored = dict(mapped.execute(select(every_type.c.i, every_type.c.n)).tuples().all())
    assert sorted(stored) == list(range(2 * BULK_ROWS))
    assert all(n == 2**40 + i for i, n in stored.items()), "the rows already there kept their first values"


def test_a_bulk_insert_with_a_null_key_fails_whole_and_writes_nothing(settings):
    with _empty_table(settings) as mapped:
        rows = [_row(i) for i in range(BULK_ROWS + 1)]
        rows[7]["workspace_id"] = None  # a key column may not be NULL: not a key that exists, an error
        with pytest.raises(IntegrityError, match="not-null"):
            insert_new(mapped, every_type, rows)
        assert mapped.execute(select(every_type.c.i)).all() == [], "nothing of the batch was written"


# what a client may put in an id: the array literal's own syntax, escapes, spaces, NULL's spelling
AWKWARD_IDS = ['a"b', "c\\d", "{x,y}", "NULL", "", " padded ", "ünï€", "tab\tnew\nline", "'", '\\"']


def test_rows_are_matched_by_keys_of_any_text(settings):
    with _empty_table(settings) as mapped:
        rows = [dict(workspace_id=w, item_id=i) for w in ("w", 'w"2') for i in AWKWARD_IDS]
        insert_new(mapped, every_type, rows)
        wanted = [(w, i) for w, i in zip(('w"2', "w") * 5, AWKWARD_IDS)]
        key = (every_type.c.workspace_id, every_type.c.item_id)
        found = mapped.execute(select(*key).where(among(key, wanted))).tuples().all()
        taken = take(mapped, every_type, wanted[:3], ["item_id"])
    assert sorted(found) == sorted(wanted)
    assert sorted(t for (t,) in taken) == sorted(i for _, i in wanted[:3])
