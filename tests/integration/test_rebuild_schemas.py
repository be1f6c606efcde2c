"""What rebuilds leave behind: one rebuild at a time; a build that a killed rebuild left, or one cut off
from Postgres, carried on from its recorded offsets, unless older code made it; a differing build kept for
inspection; and the commands that list and drop those schemas."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from psycopg.errors import QueryCanceled
from sqlalchemy import Engine, event, text
from sqlalchemy.exc import OperationalError

from peerlog.v1 import observations_pb2, workspaces_pb2
from projections.db import sync_engine
from projections.rebuild import Replayer, deferred_indexes, rebuild, recorded_offsets, start_build
from projections.rebuild_schemas import RebuildInProgress, mark_of, one_rebuild, side_schemas
from services.bus.producer import EventLog
from services.cli.client import Client
from services.events import MessageAppended, SessionCreated, WorkspaceCreated
from tests.integration.test_projector import P, msg
from tests.integration.test_rebuild import projected_session, row_count
from tests.support.processes import settings_env
from tests.support.tcp_proxy import database_behind_proxy
from tests.support.wait import eventually


@pytest.fixture
def projected(settings, projector):
    """A live projection of one session's 300 messages; the engine that reads it."""
    engine = projected_session(settings, 300)
    yield engine
    engine.dispose()


def schemas(engine, settings) -> dict[str, str]:
    """name -> kind of the schemas rebuilds left beside the live one."""
    with engine.connect() as conn:
        return {s.name: s.kind for s in side_schemas(conn, settings.database.schema_name)}


def a_build_is_marked(engine, settings) -> bool:
    """A build schema exists and carries its mark (a build killed before its mark is committed has none,
    and the next rebuild drops it instead of carrying it on)."""
    with engine.connect() as conn:
        return any(s.kind == "build" and s.mark for s in side_schemas(conn, settings.database.schema_name))


def command(settings, *args: str) -> dict:
    """The peerlog command line `args` against this test's topics and schema, as subprocess arguments."""
    return {"args": [sys.executable, "-m", "services.cli.main", *args], "env": {**os.environ, **settings_env(settings)}}


def peerlog(settings, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(**command(settings, *args), capture_output=True, text=True, timeout=300)


def rebuild_once_the_lock_is_free(settings, progress):
    """A rebuild, once Postgres has ended a killed holder's session (and its lock with it)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return rebuild(settings, progress=progress)
        except RebuildInProgress:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_rebuild_killed_mid_way_leaves_a_build_that_the_next_rebuild_carries_on_and_switches(settings, projected):
    proc = subprocess.Popen(
        **command(settings, "projections", "rebuild"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    while not a_build_is_marked(projected, settings) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL, "the rebuild finished before it could be killed mid-way"
    left = schemas(projected, settings)
    assert list(left.values()) == ["build"], left

    said: list[str] = []
    report = rebuild_once_the_lock_is_free(settings, said.append)

    assert report.switched and report.resumed and set(report.differences.values()) == {0}
    assert report.schema == next(iter(left)), said
    assert any("the live projector was paused" in line for line in said), said
    assert schemas(projected, settings) == {report.retired: "retired"}


def partial_build(settings, projected, share: float = 0.5) -> tuple[str, int]:
    """A build that replayed `share` of every partition (of the live projection's offsets), as a rebuild
    that died leaves it: its name, and the events it applied."""
    schema, engine = start_build(settings)
    replayer = Replayer(settings, engine, progress=lambda _: None)
    try:
        with projected.connect() as conn:
            live = recorded_offsets(conn, settings.database.schema_name)
        replayer.replay_to({tp: int(n * share) for tp, n in live.items()})
        return schema, replayer.events
    finally:
        replayer.close()
        engine.dispose()


def test_a_rebuild_carries_on_a_build_left_half_done_replaying_only_the_rest(settings, projected):
    schema, applied = partial_build(settings, projected)
    assert applied > 100

    resumed = rebuild(settings, progress=lambda _: None)
    assert resumed.switched and resumed.resumed and resumed.schema == schema
    assert set(resumed.differences.values()) == {0}, resumed.differences
    fresh = rebuild(settings, progress=lambda _: None)  # nothing left to carry on: from offset 0
    assert not fresh.resumed and set(fresh.differences.values()) == {0}
    assert applied + resumed.events == fresh.events  # each event applied once across the two runs


def test_a_build_left_by_code_that_parked_newer_event_versions_is_dropped_and_the_rebuild_applies_them(
    settings, projector, monkeypatch
):
    """An older peerlog parks events of a version newer than it reads, and a rebuild under the new version
    applies them (README, "Upgrading to vectors as base64"). A build the older version's rebuild left was
    carried on instead: its replay started past the parked records, it compared equal to the live schema
    (which parked them too) and switched, and the acknowledged messages were never projected."""
    live = settings.database.schema_name
    written = [msg(i) for i in range(5)]
    assert {m.schema_version for m in written} == {5}
    projector.stop()
    monkeypatch.setattr(MessageAppended, "schema_version_current", 4)  # the version before `author_name`
    projector.start()
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync(
        [WorkspaceCreated(workspace_id="w", producer=P), SessionCreated(workspace_id="w", session_id="s1", producer=P)]
    )
    log.append_sync(written)
    log.close()
    engine = sync_engine(settings.database)
    eventually(lambda: row_count(engine, live, "quarantine") == 5, timeout=60)
    older, _ = partial_build(settings, engine, share=1)  # a rebuild of the older version that died
    projector.stop()
    monkeypatch.undo()  # the upgrade
    projector.start()

    said: list[str] = []
    report = rebuild(settings, progress=said.append, accept_differences=True)

    assert row_count(engine, live, "messages") == 5, said
    assert row_count(engine, live, "quarantine") == 0
    assert not report.resumed and report.differences["messages"] == 5, report
    dropped = [line for line in said if line.startswith(f"dropped {older} ")]
    assert dropped and dropped[0].endswith(
        "made by another version of peerlog (other event versions, tables or handlers)"
    ), said
    assert schemas(engine, settings) == {report.retired: "retired"}
    engine.dispose()


def test_a_build_left_under_another_embedding_model_is_dropped_not_carried_on(settings, projected):
    schema, _ = partial_build(settings, projected)
    other = {**mark_of("build", settings.kafka.topic_prefix), "embedding_model": "another-model"}
    with projected.begin() as conn:
        conn.execute(text(f"COMMENT ON SCHEMA \"{schema}\" IS '{json.dumps(other)}'"))

    said: list[str] = []
    report = rebuild(settings, progress=said.append)
    assert report.switched and not report.resumed and report.schema != schema
    dropped = [line for line in said if line.startswith(f"dropped {schema} ")]
    assert dropped and dropped[0].endswith("made under another embedding model"), said
    assert schemas(projected, settings) == {report.retired: "retired"}


def test_a_rebuild_cut_off_from_postgres_waits_and_carries_on_its_build(settings, projected):
    proxy, behind = database_behind_proxy(settings)
    try:
        said: list[str] = []
        running = ThreadPoolExecutor(1).submit(rebuild, behind, said.append)
        deadline = time.monotonic() + 60
        while not a_build_is_marked(projected, settings) and not running.done() and time.monotonic() < deadline:
            time.sleep(0.02)
        proxy.cut()
        time.sleep(1.5)
        assert not running.done(), said  # before, the first statement cut short ended the rebuild
        proxy.restore()
        report = running.result(120)
    finally:
        proxy.stop()
    assert report.switched and set(report.differences.values()) == {0}, said
    assert report.resumed, said  # the build it started, carried on from its recorded offsets
    assert schemas(projected, settings) == {report.retired: "retired"}


def test_a_second_rebuild_while_one_runs_stops_at_once_and_writes_nothing(settings, projected):
    live = settings.database.schema_name
    with one_rebuild(projected, live):
        with pytest.raises(RebuildInProgress, match="another rebuild"):
            rebuild(settings, progress=lambda _: None)
        refused = peerlog(settings, "projections", "rebuild")
    assert refused.returncode == 2 and "another rebuild" in refused.stderr, refused.stderr
    assert schemas(projected, settings) == {}
    # the lock went with its holder: a rebuild now runs
    assert rebuild(settings, progress=lambda _: None).switched


def test_a_rebuild_with_no_live_schema_to_rebuild_stops_in_one_line_and_switches_nothing_in(settings, projected):
    # a dropped schema, or a wrong PEERLOG_DATABASE_SCHEMA: nothing to catch up with, so the empty build
    # was switched in as the live schema and the command said it served reads from it
    elsewhere = settings.model_copy(
        update={"database": settings.database.model_copy(update={"schema_name": "no_such_projection"})}
    )
    with pytest.raises(LookupError, match="no schema 'no_such_projection'"):
        rebuild(elsewhere, progress=lambda _: None)
    refused = peerlog(elsewhere, "projections", "rebuild")
    assert refused.returncode == 2 and "start the projector" in refused.stderr, refused.stderr
    with projected.connect() as conn:
        names = set(conn.scalars(text("SELECT schema_name FROM information_schema.schemata")))
    assert not {n for n in names if n.startswith("no_such_projection")}


def test_a_rebuild_under_a_topic_prefix_with_no_topics_stops_and_keeps_the_build_it_would_carry_on(settings, projected):
    live = settings.database.schema_name
    schema, engine = start_build(settings, None)  # a build a rebuild that died left, to be carried on
    engine.dispose()
    wrong = settings.model_copy(update={"kafka": settings.kafka.model_copy(update={"topic_prefix": "nope."})})
    with pytest.raises(LookupError, match="does not exist"):
        rebuild(wrong, progress=lambda _: None)
    assert schemas(projected, settings) == {schema: "build"}
    assert live != schema


def test_a_build_that_differs_is_kept_for_inspection_until_an_operator_drops_it(settings, projected):
    live = settings.database.schema_name
    with projected.begin() as conn:  # the live projection no longer matches its log
        conn.execute(text(f"UPDATE \"{live}\".messages SET content = 'tampered' WHERE seq = 7"))
    differed = rebuild(settings, progress=lambda _: None)
    assert not differed.switched and differed.differences["messages"] == 2
    assert schemas(projected, settings) == {differed.schema: "kept"}

    switched = rebuild(settings, progress=lambda _: None, accept_differences=True)
    assert switched.switched
    assert schemas(projected, settings) == {differed.schema: "kept", switched.retired: "retired"}
    listed = peerlog(settings, "projections", "schemas")
    assert listed.returncode == 0
    # the live schema, then the others by name (build before retired)
    assert [line.split("\t")[:2] for line in listed.stdout.splitlines()] == [
        ["live", live],
        ["kept", differed.schema],
        ["retired", switched.retired],
    ]

    for name, why in ((live, "is the live schema"), ("public", "is not a build, kept or retired schema")):
        refused = peerlog(settings, "projections", "drop", name)
        assert refused.returncode == 2 and why in refused.stderr, refused.stderr
    dropped = peerlog(settings, "projections", "drop", differed.schema)
    assert dropped.returncode == 0, dropped.stderr
    assert dropped.stdout.startswith(f"dropped kept schema {differed.schema} ")
    assert schemas(projected, settings) == {switched.retired: "retired"}
    assert row_count(projected, live, "messages") == 300  # reads still served, from the rebuilt schema


def test_a_rebuild_started_while_the_broker_is_away_waits_and_switches_once_it_is_back(infra, settings, projected):
    if infra.kafka is None:
        pytest.skip("needs the local broker, which the tests can stop")
    infra.kafka.stop()
    try:
        said: list[str] = []
        running = ThreadPoolExecutor(1).submit(rebuild, settings, said.append)
        time.sleep(15)  # longer than a partition listing waits (10 s): before, the rebuild raised here
        assert not running.done(), said
    finally:
        infra.kafka.start()
    report = running.result(180)
    assert report.switched and set(report.differences.values()) == {0}, said
    assert schemas(projected, settings) == {report.retired: "retired"}


def test_a_rebuild_whose_statements_time_out_stops_at_once_instead_of_waiting_for_the_database(settings, projected):
    timing_out = settings.model_copy(
        update={
            "database": settings.database.model_copy(
                update={"url": settings.database.url + "?options=-c%20statement_timeout%3D1"}
            )
        }
    )
    stop = threading.Event()
    running = ThreadPoolExecutor(1).submit(rebuild, timing_out, lambda _: None, False, stop)
    try:
        error = running.exception(60)  # before, it tried again forever, logging "the database is unavailable"
    finally:
        stop.set()
    assert isinstance(error, OperationalError) and isinstance(error.orig, QueryCanceled), error


async def test_a_build_left_by_older_code_is_upgraded_when_carried_on_and_matches_the_live_projection(
    channel, settings
):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    new = observations_pb2.NewObservation(content="alice is allergic to peanuts", observation_id="peanuts")
    written = await c.create_observations("w", "alice", "alice", [new])
    await c.all_observations("w", "alice", "alice", written.consistency_token)

    def older_codes_build() -> str:
        """A build as a killed rebuild of the version before left it: what clients wrote stamped with the
        derivation current then (""), and no mark of the restamp."""
        live = sync_engine(settings.database)
        schema, engine = start_build(settings)
        replayer = Replayer(settings, engine, progress=lambda _: None)
        try:
            with live.connect() as conn:
                replayer.replay_to(recorded_offsets(conn, settings.database.schema_name))
        finally:
            replayer.close()
        with engine.begin() as conn:
            conn.execute(text(f"UPDATE \"{schema}\".observations SET derivation = '' WHERE derivation = '*'"))
            conn.execute(text(f'ALTER TABLE "{schema}".projection_meta DROP COLUMN client_writes_pair_wide'))
        engine.dispose()
        live.dispose()
        return schema

    schema = await asyncio.to_thread(older_codes_build)
    report = await asyncio.to_thread(lambda: rebuild(settings, progress=lambda _: None))
    assert report.resumed and report.schema == schema
    assert report.switched and set(report.differences.values()) == {0}, report.differences


def index_names(engine, schema: str) -> set[str]:
    with engine.connect() as conn:
        found = conn.execute(text("SELECT indexname FROM pg_indexes WHERE schemaname = :s"), {"s": schema})
        return set(found.scalars())


@contextmanager
def indexes_created(schema: str, timeline: list[str]) -> Iterator[None]:
    """Note "built <name>" in `timeline` for each index any engine creates in `schema` while the body runs."""

    def noted(_conn, _cursor, statement: str, *_) -> None:
        created = re.match(rf'CREATE INDEX "?(\w+)"? ON "?{re.escape(schema)}"?\.', statement)
        if created:
            timeline.append(f"built {created[1]}")

    event.listen(Engine, "before_cursor_execute", noted)
    try:
        yield
    finally:
        event.remove(Engine, "before_cursor_execute", noted)


async def test_carrying_on_a_build_builds_no_search_index_before_its_replay_catches_up(channel, settings, projected):
    """Each carrying on of a build (after a kill, or after every Postgres outage) built the HNSW and GIN
    indexes over the rows replayed so far, then dropped them: minutes thrown away on a large log."""
    schema, _ = await asyncio.to_thread(partial_build, settings, projected)
    deferred = [index.name for index in deferred_indexes()]
    timeline: list[str] = []
    held_while_replaying: set[str] = set()

    def said(line: str) -> None:
        if line.startswith("caught up with the live projection"):
            held_while_replaying.update(set(deferred) & index_names(projected, schema))
            timeline.append("caught up")

    with indexes_created(schema, timeline):
        report = await asyncio.to_thread(rebuild, settings, said)

    assert report.resumed and report.schema == schema and report.switched, report
    assert not held_while_replaying
    assert timeline == ["caught up", *(f"built {name}" for name in deferred)]  # each once, over every row
    assert set(deferred) <= index_names(projected, settings.database.schema_name)
    found = await Client(channel).workspaces.SearchMessages(
        workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="w", query="turn 123", limit=3)
    )
    assert found.results[0].message.content == "turn 123", found
