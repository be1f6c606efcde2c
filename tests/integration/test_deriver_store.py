"""The deriver's duplicate lookup against a real Postgres: exact over the pair's rows, however big the workspace."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import create_async_engine

from projections.db import create_schema, sync_engine
from projections.deriver_reads import ObservationStore
from projections.schema import EMBEDDING_DIMENSIONS
from services.events.pairs import Pair

MODEL = "test-model"


def unit(values: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


def near(axis: int, cos: float, rng: random.Random) -> list[float]:
    """A unit vector at cosine `cos` from the `axis` unit vector, in a random other direction."""
    other = [0.0 if i == axis else rng.gauss(0, 1) for i in range(EMBEDDING_DIMENSIONS)]
    other = unit(other)
    return [cos if i == axis else math.sqrt(1 - cos * cos) * v for i, v in enumerate(other)]


def vec(values: list[float]) -> str:
    return "[" + ",".join(f"{v:.7g}" for v in values) + "]"


def insert(conn, schema: str, rows: list[tuple[str, str, str, list[float]]], session: str = "s") -> None:
    conn.execute(
        text(
            f'INSERT INTO "{schema}".observations (workspace_id, observation_id, observer_id, observed_id, level, content, '
            "content_key, session_id, embedding, embedding_model, times_derived, created_at, event_id) VALUES "
            "('w', :id, :o, :d, :l, :c, :c, :s, CAST(:e AS vector), :m, 1, :t, :id)"
        ),
        [
            {
                "id": i,
                "o": o,
                "d": "bob",
                "l": lvl,
                "c": f"fact {i}",
                "s": session,
                "e": vec(e),
                "m": MODEL,
                "t": datetime.now(UTC),
            }
            for i, o, lvl, e in rows
        ],
    )


QUERY = [1.0] + [0.0] * (EMBEDDING_DIMENSIONS - 1)


@pytest.fixture
def store_schema(settings):
    schema = settings.database.schema_name
    engine = sync_engine(settings.database)
    create_schema(engine, schema)
    yield engine, schema
    engine.dispose()


async def test_a_pairs_near_duplicate_is_found_among_many_other_pairs_nearer_the_query(settings, store_schema):
    engine, schema = store_schema
    rng = random.Random(7)
    # the projection keeps no HNSW index over observations (no read walks one); an operator's, or a later
    # version's, must not change what the lookup finds
    with engine.begin() as conn:
        conn.execute(
            text(f'CREATE INDEX operators_hnsw ON "{schema}".observations USING hnsw (embedding vector_cosine_ops)')
        )
    # 600 observations of other observers of bob, all nearer the query than alice's own: an HNSW walk
    # (ef_search 40) returns only theirs, the pair filter drops them all, and the duplicate is missed.
    # 600 is 15 times what one walk yields; more only made the test slower (each insert updates the index)
    others = [(f"x{i}", f"peer{i % 60}", "explicit", near(0, 0.99, rng)) for i in range(600)]
    derived = [(f"d{i}", "alice", "deductive", near(0, 0.99, rng)) for i in range(600)]
    mine = ("mine", "alice", "explicit", near(0, 0.6, rng))
    with engine.begin() as conn:
        insert(conn, schema, others + derived + [mine])
        conn.execute(text(f'ANALYZE "{schema}".observations'))
    aengine = create_async_engine(settings.database.url)
    sent = []
    event.listen(aengine.sync_engine, "before_cursor_execute", lambda *a: sent.append((a[2], a[3])))
    try:
        store = ObservationStore(aengine, schema, MODEL)
        found = await store.candidates(Pair("w", "alice", "bob"), [], [QUERY], ["s"])
    finally:
        await aengine.dispose()
    assert [k.observation_id for k in found] == ["mine"]
    # and by construction, not by this data's luck: the plan has no HNSW scan to post-filter
    statement, params = sent[-1]
    with engine.connect() as conn:
        cursor = conn.connection.cursor()
        cursor.execute("EXPLAIN " + statement, params)
        plan = "\n".join(r[0] for r in cursor.fetchall())
    assert "operators_hnsw" not in plan, plan


async def test_a_near_duplicate_in_the_facts_session_is_found_when_another_sessions_copy_is_nearer(
    settings, store_schema
):
    # a fact restated in a new session is that session's (the judge matches only there): the nearest row of
    # the whole pair was another session's copy, and the one in the fact's own session went unseen
    engine, schema = store_schema
    rng = random.Random(11)
    with engine.begin() as conn:
        insert(conn, schema, [("elsewhere", "alice", "explicit", near(0, 0.999, rng))], session="s1")
        insert(conn, schema, [("here", "alice", "explicit", near(0, 0.98, rng))], session="s3")
    aengine = create_async_engine(settings.database.url)
    try:
        found = await ObservationStore(aengine, schema, MODEL).candidates(
            Pair("w", "alice", "bob"), [], [QUERY], ["s3"]
        )
    finally:
        await aengine.dispose()
    assert [k.observation_id for k in found] == ["here"]
