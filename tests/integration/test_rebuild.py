"""Replaying the whole log into a fresh schema reproduces the live projections row for row."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import orjson
from confluent_kafka import Producer
from pgvector.psycopg import register_vector
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError

from peerlog.v1 import sessions_pb2
from projections.db import sync_engine
from projections.rebuild import compare, rebuild
from projections.schema import ACTIVE_EMBEDDING_MODEL, DATA_TABLES, quarantine
from services.bus.producer import EventLog
from services.bus.topics import topic_for
from services.cli.client import Client
from services.events import (
    EmbeddedMessage,
    MessagesEmbedded,
    ObservationAdded,
    SessionCreated,
    WorkspaceCreated,
    encode,
)
from tests.integration.test_projector import P, msg, too_big_for_its_index_entry
from tests.support.wait import eventually


async def random_workload(c: Client, rng: random.Random, rounds: int) -> str:
    """Workspaces, peers, sessions, joins, leaves and messages in a random but valid order."""
    token = ""
    members: dict[tuple[str, str], set[str]] = {}
    for w in ("acme", "globex"):
        await c.workspace(w)
        for p in ("alice", "bob", "carol", "dave"):
            await c.peer(w, p, observe_me=rng.random() > 0.2)
    for _ in range(rounds):
        w, s = rng.choice(["acme", "globex"]), rng.choice(["s1", "s2", "s3"])
        current = members.setdefault((w, s), set())
        action = rng.random()
        if not current or action < 0.1:
            outsiders = sorted({"alice", "bob", "carol", "dave"} - current)
            joiner = rng.choice(outsiders) if outsiders else None
            if joiner:
                await c.session(
                    w, s, members=[sessions_pb2.MemberSpec(peer_id=joiner, observe_others=rng.random() > 0.5)]
                )
                current.add(joiner)
        elif action < 0.15 and len(current) > 1:
            leaver = rng.choice(sorted(current))
            await c.sessions.RemoveMembers(
                sessions_pb2.RemoveMembersRequest(workspace_id=w, session_id=s, peer_ids=[leaver])
            )
            current.discard(leaver)
        else:
            turns = [
                (rng.choice(sorted(current)), f"note {rng.random():.6f} about {rng.choice(['rust', 'tea', 'oslo'])}")
                for _ in range(rng.randint(1, 30))
            ]
            token = (await c.add(w, s, turns)).consistency_token
    return token


def table_rows(engine, schema: str, table: str) -> list:
    with engine.connect() as conn:
        return conn.execute(text(f'SELECT * FROM "{schema}"."{table}" ORDER BY 1, 2, 3')).all()


def row_count(engine, schema: str, table: str) -> int:
    """Rows in the table, 0 while the projector has not created the schema yet (a loaded machine is slow to)."""
    try:
        return len(table_rows(engine, schema, table))
    except ProgrammingError:
        return 0


async def test_a_rebuild_reproduces_every_table_and_the_live_projector_carries_on(channel, settings):
    c = Client(channel)
    rng = random.Random(20261129)
    await random_workload(c, rng, rounds=60)
    await c.session("acme", "s1", members=["alice"])  # alice is a current member from here on

    async def keep_writing():
        for i in range(20):
            await c.add("acme", "s1", [("alice", f"during rebuild {i}")])
            await asyncio.sleep(0.02)

    writer = asyncio.create_task(keep_writing())
    report = await asyncio.get_running_loop().run_in_executor(None, lambda: rebuild(settings, progress=print))
    await writer

    assert report.switched and report.retired
    assert set(report.differences) == {t.name for t in DATA_TABLES}
    assert set(report.differences.values()) == {0}, report.differences
    engine = sync_engine(settings.database)
    for table in ("workspaces", "peers", "sessions", "memberships", "messages"):
        assert table_rows(engine, report.retired, table), f"{table} was empty: the comparison proved nothing"

    # writes made during and after the switch land in the rebuilt schema, in sequence
    after = await c.add("acme", "s1", [("alice", "after the switch")])
    got = await c.all_messages("acme", "s1", token=after.consistency_token, page_size=1000)
    assert [m.content for m in got if m.content.startswith("during")] == [f"during rebuild {i}" for i in range(20)]
    assert got[-1].content == "after the switch"
    assert [m.seq for m in got] == list(range(1, len(got) + 1))


def projected_session(settings, messages: int):
    """An engine on a live projection of one session holding `messages` messages, appended to the log."""
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync(
        [WorkspaceCreated(workspace_id="w", producer=P), SessionCreated(workspace_id="w", session_id="s1", producer=P)]
    )
    log.append_sync([msg(i) for i in range(messages)])
    log.close()
    engine = sync_engine(settings.database)
    eventually(lambda: row_count(engine, settings.database.schema_name, "messages") == messages)
    return engine


def test_a_rebuild_of_the_same_log_twice_gives_identical_tables(settings, projector, infra):
    """Rebuilding is deterministic: nothing in a projection depends on when it was built."""
    engine = projected_session(settings, 200)
    first = rebuild(settings, progress=lambda _: None)
    second = rebuild(settings, progress=lambda _: None)
    assert first.switched and second.switched
    with engine.connect() as conn:
        assert set(compare(conn, first.retired, second.retired).values()) == {0}
        assert set(compare(conn, second.retired, settings.database.schema_name).values()) == {0}


def index_definitions(engine, schema: str) -> set[str]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT indexdef FROM pg_indexes WHERE schemaname = :s"), {"s": schema}).scalars()
        return {d.replace(f'"{schema}".', "").replace(f"{schema}.", "") for d in rows}


def test_a_rebuilt_schema_serves_with_every_index_the_live_one_had(settings, projector, infra):
    """Some indexes are built beside the replay, the rest after it: the schema switched in has them all
    (searches by meaning and by words would otherwise scan whole tables)."""
    engine = projected_session(settings, 50)
    report = rebuild(settings, progress=lambda _: None)
    assert report.switched
    retired, serving = (
        index_definitions(engine, report.retired),
        index_definitions(engine, settings.database.schema_name),
    )
    assert any("USING hnsw" in d for d in serving) and any("USING gin" in d for d in serving)
    assert serving == retired


def _written_as_numbers(event, **old) -> bytes:
    """`event` as code before base64 vectors wrote it: `old` holds the fields as lists of numbers."""
    return orjson.dumps({**orjson.loads(encode(event)), **old})


def test_vectors_older_code_wrote_as_numbers_project_and_rebuild_like_those_written_now(settings, projector, infra):
    """A log from before vectors went as base64 holds lists of numbers. Both forms project to the same
    stored vectors (float32, as Postgres keeps them), and a rebuild over the mixed log matches the live
    projection row for row."""
    values = np.random.default_rng(3).standard_normal((4, 384))
    values /= np.linalg.norm(values, axis=1, keepdims=True)
    new_msg, old_msg, new_obs, old_obs = (v.tolist() for v in values)
    pair = dict(workspace_id="w", observer_id="alice", observed_id="bob", level="explicit", producer=P)
    embedded = [
        MessagesEmbedded(
            workspace_id="w", session_id="s1", embedding_model=ACTIVE_EMBEDDING_MODEL, producer=P,
            messages=(EmbeddedMessage(message_id=f"m{i}", session_id="s1", vector=v),),
        )
        for i, v in enumerate((new_msg, old_msg))
    ]  # fmt: skip
    added = [
        ObservationAdded(observation_id=f"o{i}", content=f"fact {i}", embedding=v, embedding_model=ACTIVE_EMBEDDING_MODEL, **pair)
        for i, v in enumerate((new_obs, old_obs))
    ]  # fmt: skip
    engine = projected_session(settings, 2)
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync([embedded[0], added[0]])
    log.close()
    old = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers})
    prefix = settings.kafka.topic_prefix
    first = {**orjson.loads(encode(embedded[1]))["messages"][0], "vector": old_msg}
    for event, raw in (
        (embedded[1], _written_as_numbers(embedded[1], schema_version=1, messages=[first])),
        (added[1], _written_as_numbers(added[1], schema_version=3, embedding=old_obs)),
    ):
        old.produce(topic_for(event).full_name(prefix), raw, key=event.key.encode())
    assert old.flush(30) == 0
    schema = settings.database.schema_name
    with engine.connect() as conn:
        register_vector(conn.connection.driver_connection)

        def stored(table: str, key: str) -> list:
            return conn.execute(text(f'SELECT embedding FROM "{schema}".{table} ORDER BY {key}')).scalars().all()

        eventually(
            lambda: (
                all(v is not None for v in stored("messages", "message_id"))
                and len(stored("observations", "observation_id")) == 2
            )
        )
        for table, key, expected in (
            ("messages", "message_id", values[:2]),
            ("observations", "observation_id", values[2:]),
        ):
            got = np.stack([v.to_numpy() for v in stored(table, key)])  # pgvector's Vector
            assert np.array_equal(got, expected.astype(np.float32)), table
    result = rebuild(settings, progress=lambda _: None)
    assert result.switched
    with engine.connect() as conn:
        assert set(compare(conn, result.retired, schema).values()) == {0}


def test_an_event_the_live_projector_parked_for_a_postgres_limit_is_parked_by_the_rebuild_too(
    settings, projector, infra
):
    """The live projector parks an observation whose index entry Postgres refuses. A rebuild that built
    that index only after its replay took the row, then failed building the index, at every try: the
    log could never be rebuilt again. It now meets the same refusal at the same event and switches."""
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync([too_big_for_its_index_entry()])
    log.close()
    engine = projected_session(settings, 3)
    schema = settings.database.schema_name
    eventually(lambda: row_count(engine, schema, quarantine.name) == 1)
    report = rebuild(settings, progress=lambda _: None)
    assert report.switched, report
    assert set(report.differences.values()) == {0}, report.differences
    (parked,) = table_rows(engine, schema, quarantine.name)
    assert "ObservationAdded" in parked.reason and "index row size" in parked.reason
