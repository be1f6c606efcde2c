"""Replaying the whole log into a fresh schema reproduces the live projections row for row."""

from __future__ import annotations

import asyncio
import random

from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError

from peerlog.v1 import sessions_pb2
from projections.db import sync_engine
from projections.rebuild import compare, rebuild
from projections.schema import DATA_TABLES
from services.cli.client import Client


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
    from services.bus.producer import EventLog
    from services.events import SessionCreated, WorkspaceCreated
    from tests.integration.test_projector import P, msg
    from tests.support.wait import eventually

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
