"""The projector applies each event exactly once, parks what it cannot read, ignores aborted writes, waits out
a database outage, and started again under its instance id takes its partitions back at once."""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from confluent_kafka import Producer
from prometheus_client import REGISTRY
from sqlalchemy import func, select

from projections import append_reads, peer_reads
from projections.configurations import levels
from projections.db import async_engine, create_schema, sync_engine
from projections.handlers import HANDLERS
from projections.schema import (
    ACTIVE_EMBEDDING_MODEL,
    EMBEDDING_DIMENSIONS,
    configurations,
    messages,
    peer_cards,
    quarantine,
    sessions,
)
from services.bus.producer import EventLog
from services.bus.topics import SESSIONS
from services.events import (
    Configuration,
    Level,
    MessageAppended,
    ObservationAdded,
    PackedVector,
    PeerCardUpdated,
    ProducerInfo,
    SessionConfigured,
    SessionCreated,
    WorkspaceConfigured,
    WorkspaceCreated,
    encode,
)
from tests.support.processes import Worker
from tests.support.running_projector import RunningProjector
from tests.support.tcp_proxy import database_behind_proxy
from tests.support.wait import eventually

P = ProducerInfo(component="test", version="0")


def msg(i: int, session: str = "s1") -> MessageAppended:
    return MessageAppended(
        workspace_id="w",
        session_id=session,
        message_id=f"m{i}",
        peer_id="alice",
        content=f"turn {i}",
        created_at=datetime.now(UTC),
        producer=P,
    )


def count(engine, table, *where) -> int:
    with engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(table).where(*where))


def seqs(engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.scalars(select(messages.c.seq).order_by(messages.c.seq)))


@pytest.fixture
def cut_off(settings) -> Iterator[tuple]:
    """(engine, proxy, running projector): the projector reaches Postgres only through `proxy`, which a test
    cuts and restores; `engine` reads the same database directly."""
    engine = sync_engine(settings.database)
    create_schema(engine, settings.database.schema_name)
    proxy, behind = database_behind_proxy(settings)
    running = RunningProjector(behind)
    running.start()
    yield engine, proxy, running
    running.stop()
    proxy.stop()
    engine.dispose()


def test_malformed_and_unknown_records_are_quarantined_and_the_projector_moves_on(settings, projector):
    topic = SESSIONS.full_name(settings.kafka.topic_prefix)
    raw = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers})
    raw.produce(topic, b"{not json", key=b"w/s1")
    raw.produce(topic, b'{"type": "MessageTeleported", "workspace_id": "w"}', key=b"w/s1")
    future = encode(msg(1)).replace(
        f'"schema_version":{MessageAppended.schema_version_current}'.encode(), b'"schema_version":99'
    )
    raw.produce(topic, future, key=b"w/s1")
    # a foreign record with a binary key: Postgres text holds no NUL, so parking it failed, and the projector
    # stopped at it for good
    raw.produce(topic, b'{"type": "ForeignEvent", "workspace_id": "w"}', key=b"\x00\xffw")
    # a time without a zone: read as valid, it failed the write with a TypeError, which stopped the projector
    # at that record for good (and took the good message of its batch with it)
    naive = re.sub(rb'("created_at":"[^"+Z]+)(?:\+00:00|Z)"', rb'\1"', encode(msg(3)))
    raw.produce(topic, naive, key=b"w/s1")
    raw.flush(10)
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync(
        [
            WorkspaceCreated(workspace_id="w", producer=P),
            SessionCreated(workspace_id="w", session_id="s1", producer=P),
            msg(2),
        ]
    )
    engine = sync_engine(settings.database)

    eventually(lambda: count(engine, messages) == 1)
    with engine.connect() as conn:
        reasons = sorted(conn.scalars(select(quarantine.c.reason)))
    assert len(reasons) == 5
    assert any("not JSON" in r for r in reasons)
    assert any("timezone" in r for r in reasons)
    assert any("unknown event type 'ForeignEvent'" in r for r in reasons)
    with engine.connect() as conn:
        assert "\ufffd\ufffdw" in set(conn.scalars(select(quarantine.c.key)))
    assert any("unknown event type 'MessageTeleported'" in r for r in reasons)
    assert any("newer than this code" in r for r in reasons)
    log.close()


def too_big_for_its_index_entry() -> ObservationAdded:
    """An observation with ids of 512 characters beside a vector: its entry in the covering index
    (observations_by_pair_ranked) is over the 2,704 bytes a btree entry holds, which Postgres refuses at
    every try (the API refuses such ids; an older version's log, or another writer's, may hold them)."""

    def long_id() -> str:  # random: no compression brings the entry under the limit
        return "x" + secrets.token_hex(256)[:511]

    return ObservationAdded(
        workspace_id=long_id(),
        observer_id=long_id(),
        observed_id=long_id(),
        observation_id="o-big",
        level=Level.EXPLICIT,
        content="keeps bees",
        embedding=PackedVector.of([0.05] * EMBEDDING_DIMENSIONS),
        embedding_model=ACTIVE_EMBEDDING_MODEL,  # another model's vector is not stored
        producer=P,
    )


def test_an_event_whose_row_passes_a_postgres_size_limit_is_parked_and_the_projector_moves_on(settings, projector):
    # the projector took it for the database being unwell, stopped, and stopped again at every restart,
    # for every workspace of the partition
    big = too_big_for_its_index_entry()
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync([big])
    log.append_sync(
        [
            WorkspaceCreated(workspace_id="w", producer=P),
            SessionCreated(workspace_id="w", session_id="s1", producer=P),
            msg(1),
        ]
    )
    engine = sync_engine(settings.database)
    eventually(lambda: count(engine, messages) == 1 and count(engine, quarantine) == 1)  # apart: two topics
    with engine.connect() as conn:
        (reason,) = conn.scalars(select(quarantine.c.reason))
    assert "ObservationAdded" in reason and "index row size" in reason
    log.close()


def quarantined_total(topic: str) -> float | None:
    return REGISTRY.get_sample_value("peerlog_projector_quarantined_total", {"topic": topic})


def test_a_parked_record_is_logged_and_counted_in_metrics(settings, projector, caplog):
    # parked in silence before: the acknowledged write never became readable, and the lag gauges stayed at 0
    caplog.set_level(logging.ERROR)
    topic = SESSIONS.full_name(settings.kafka.topic_prefix)
    assert quarantined_total(topic) == 0  # shown from the start
    words = "the users own words"  # quoted by pydantic in the reason, which the log line must not show
    raw = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers})
    raw.produce(topic, orjson.dumps({"type": "MessageAppended", "workspace_id": "w", "created_at": words}), key=b"w/s1")
    raw.flush(10)
    engine = sync_engine(settings.database)

    eventually(lambda: quarantined_total(topic) == 1)
    with engine.connect() as conn:
        q = quarantine.c
        partition, offset, reason = conn.execute(select(q.partition, q.offset, q.reason)).one()
    assert words in reason  # the row keeps it whole
    said = [r for r in caplog.records if r.name == "projections.apply" and r.levelno == logging.ERROR]
    assert [r.getMessage().split(": invalid MessageAppended")[0] for r in said] == [
        f"projector parked a record in quarantine: topic {topic} partition {partition} offset {offset}"
    ]
    assert "created_at" in said[0].getMessage() and words not in said[0].getMessage()


def test_a_handler_raising_a_python_error_parks_the_event_and_the_projector_moves_on(
    settings, projector, monkeypatch, caplog
):
    # only a database error was parked: the TypeError or OverflowError of a handler ended the projector's run,
    # and every restart met the same event again
    caplog.set_level(logging.ERROR)
    applied = HANDLERS[MessageAppended]

    def fails_on_m2(conn, events):
        if any(e.message_id == "m2" for e in events):
            raise OverflowError("a value the handler did not expect")
        applied(conn, events)

    monkeypatch.setitem(HANDLERS, MessageAppended, fails_on_m2)
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync(
        [
            WorkspaceCreated(workspace_id="w", producer=P),
            SessionCreated(workspace_id="w", session_id="s1", producer=P),
            *(msg(i) for i in (1, 2, 3)),
        ]
    )
    engine = sync_engine(settings.database)

    eventually(lambda: count(engine, messages) == 2 and count(engine, quarantine) == 1)
    with engine.connect() as conn:
        assert list(conn.scalars(select(quarantine.c.reason))) == [
            "could not apply MessageAppended: OverflowError: a value the handler did not expect"
        ]
    assert any(isinstance(r.exc_info[1], OverflowError) for r in caplog.records if r.exc_info)  # its traceback
    log.append_sync([msg(4)])
    eventually(lambda: count(engine, messages) == 3)
    assert projector.thread.is_alive()
    log.close()


def test_a_restarted_projector_applies_nothing_twice(settings, projector):
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync(
        [WorkspaceCreated(workspace_id="w", producer=P), SessionCreated(workspace_id="w", session_id="s1", producer=P)]
    )
    log.append_sync([msg(i) for i in range(50)])
    engine = sync_engine(settings.database)
    eventually(lambda: count(engine, messages) == 50)

    projector.stop()
    log.append_sync([msg(i) for i in range(50, 60)])
    projector.start()

    eventually(lambda: count(engine, messages) == 60)
    assert seqs(engine) == list(range(1, 61))
    with engine.connect() as conn:
        assert conn.scalar(select(sessions.c.message_count)) == 60
    log.close()


def test_the_projector_waits_out_a_database_outage_and_then_projects_every_message_once(settings, cut_off):
    """Postgres away for a while (a restart, a network cut) stops the projection, not the projector: once
    the database is back it goes on from where its rows stop, without a supervisor to restart it."""
    engine, proxy, running = cut_off
    log = EventLog(settings.kafka)
    log.start()
    try:
        log.append_sync(
            [
                WorkspaceCreated(workspace_id="w", producer=P),
                SessionCreated(workspace_id="w", session_id="s1", producer=P),
            ]
        )
        log.append_sync([msg(i) for i in range(20)])
        eventually(lambda: count(engine, messages) == 20)

        proxy.cut()
        log.append_sync([msg(i) for i in range(20, 40)])
        # the projector meets the outage: refused connections, for longer than a few retries take
        eventually(lambda: running.projector.database_waits > 0, timeout=10)
        time.sleep(2)
        assert running.thread.is_alive()
        assert count(engine, messages) == 20

        proxy.restore()
        log.append_sync([msg(i) for i in range(40, 50)])
        # tries are at most RETRY_MAX_S (2 s) apart: back well within 10 s, with no Kafka rebalance
        eventually(lambda: count(engine, messages) == 50, timeout=10)
        assert seqs(engine) == list(range(1, 51))
        assert running.thread.is_alive()
    finally:
        log.close()


def test_the_same_event_delivered_twice_is_applied_once(settings, projector):
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync(
        [WorkspaceCreated(workspace_id="w", producer=P), SessionCreated(workspace_id="w", session_id="s1", producer=P)]
    )
    once = msg(1)
    log.append_sync([once, msg(2)])
    log.append_sync([once])  # e.g. a client retry that re-sent an already-written event
    log.append_sync([msg(3)])
    engine = sync_engine(settings.database)
    eventually(lambda: count(engine, messages) == 3)
    assert seqs(engine) == [1, 2, 3]
    log.close()


def test_an_aborted_transaction_never_reaches_the_projections(settings, projector):
    topic = SESSIONS.full_name(settings.kafka.topic_prefix)
    txn = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers, "transactional.id": "aborter"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, encode(msg(1)), key=b"w/s1")
    txn.flush(10)
    txn.abort_transaction(30)
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync([msg(2)])
    engine = sync_engine(settings.database)
    eventually(lambda: count(engine, messages) == 1)
    with engine.connect() as conn:
        assert conn.scalar(select(messages.c.message_id)) == "m2"
    log.close()


def test_a_member_sees_the_messages_between_its_join_and_its_leave_in_log_order_whatever_the_clocks_say(
    settings, projector
):
    """Several API processes stamp events by their own clocks: a join may carry a later time than a message
    appended after it. Visibility follows the log, as the router perceives."""
    from datetime import timedelta

    from projections.message_reads import seen_while_member
    from projections.schema import message_terms
    from services.events import MemberJoined, MemberLeft

    t0 = datetime(2026, 3, 1, tzinfo=UTC)

    def at(event, seconds):
        return event.model_copy(update={"occurred_at": t0 + timedelta(seconds=seconds)})

    def joined(peer, seconds):
        return at(
            MemberJoined(
                workspace_id="w", session_id="s1", peer_id=peer, joined_at=t0 + timedelta(seconds=seconds), producer=P
            ),
            seconds,
        )

    log = EventLog(settings.kafka)
    log.start()
    log.append_sync(
        [
            WorkspaceCreated(workspace_id="w", producer=P),
            SessionCreated(workspace_id="w", session_id="s1", producer=P),
            joined("alice", 0),
            at(msg(1), 10),  # before carol's join in the log, though stamped after it
            joined("carol", 5),
            at(msg(2), 6),
            at(
                MemberLeft(
                    workspace_id="w", session_id="s1", peer_id="carol", left_at=t0 + timedelta(seconds=1), producer=P
                ),
                1,
            ),
            at(msg(3), 7),
        ]
    )  # after carol's leave in the log, though stamped after the time her leave carries
    engine = sync_engine(settings.database)
    eventually(lambda: count(engine, messages) == 3)
    with engine.connect() as conn:
        for table in (messages, message_terms):
            seen = conn.scalars(select(table.c.message_id).where(seen_while_member(table, "carol"))).all()
            assert seen == ["m2"], table.name
        assert sorted(conn.scalars(select(messages.c.message_id).where(seen_while_member(messages, "alice")))) == [
            "m1",
            "m2",
            "m3",
        ]
    log.close()


def test_a_projector_stopped_while_the_database_is_away_exits_cleanly_and_writes_nothing(settings, cut_off):
    engine, proxy, running = cut_off
    log = EventLog(settings.kafka)
    log.start()
    try:
        proxy.cut()
        log.append_sync([WorkspaceCreated(workspace_id="w", producer=P)])
        eventually(lambda: running.projector.database_waits > 0, timeout=10)
        thread = running.thread
        running.projector.stop()
        thread.join(10)
        assert not thread.is_alive()
        assert count(engine, messages) == 0
    finally:
        log.close()


# long, so that waiting it out cannot pass for taking the partitions back
SESSION_TIMEOUT_S = 60


def test_a_projector_killed_and_started_again_under_its_instance_id_resumes_before_its_old_session_expires(
    settings, tmp_path
):
    engine = sync_engine(settings.database)
    create_schema(engine, settings.database.schema_name)
    env = {"PEERLOG_PROJECTOR_INSTANCE_ID": "projector-1", "PEERLOG_PROJECTOR_SESSION_TIMEOUT_S": "60"}
    log = EventLog(settings.kafka)
    log.start()
    first = Worker(settings, tmp_path / "first.log", env, command="projector run").start()
    second = Worker(settings, tmp_path / "second.log", env, command="projector run")
    try:
        log.append_sync(
            [
                WorkspaceCreated(workspace_id="w", producer=P),
                SessionCreated(workspace_id="w", session_id="s1", producer=P),
            ]
        )
        log.append_sync([msg(i) for i in range(10)])
        eventually(lambda: count(engine, messages) == 10, timeout=60)

        first.kill()
        log.append_sync([msg(i) for i in range(10, 20)])
        started = time.monotonic()
        second.start()
        eventually(lambda: count(engine, messages) == 20, timeout=SESSION_TIMEOUT_S)
        resumed_s = time.monotonic() - started
        # a process start and a join, not the dead member's 60 s session
        assert resumed_s < SESSION_TIMEOUT_S / 2, second.log_text()[-2000:]
    finally:
        first.kill()
        second.stop()
        log.close()
        engine.dispose()


def test_a_dreams_card_is_applied_only_over_the_card_it_read_so_a_clients_card_set_meanwhile_stands(
    settings, projector
):
    # the dream checked the card before its commit, but a client's card not yet projected then passed the
    # check, and the dream's card (made from the older one) replaced it on the log
    from projections.schema import peer_cards
    from services.events import PeerCardUpdated

    pair = dict(workspace_id="w", observer_id="bob", observed_id="bob", producer=P)
    read = ("IDENTITY: Bob",)
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync([PeerCardUpdated(**pair, entries=read)])  # what the dream read
    log.append_sync([PeerCardUpdated(**pair, entries=("IDENTITY: Robert",))])  # a client's, meanwhile
    log.append_sync([PeerCardUpdated(**pair, entries=("IDENTITY: Bob", "ATTRIBUTE: tall"), replaces=read)])
    log.append_sync(
        [PeerCardUpdated(**pair, entries=("IDENTITY: Robert", "ATTRIBUTE: tall"), replaces=("IDENTITY: Robert",))]
    )
    log.close()
    engine = sync_engine(settings.database)
    cards = lambda: [r.entries for r in _rows(engine, peer_cards)]  # noqa: E731
    eventually(lambda: len(cards()) == 3)
    assert cards() == [["IDENTITY: Bob"], ["IDENTITY: Robert"], ["IDENTITY: Robert", "ATTRIBUTE: tall"]]


def _rows(engine, table) -> list:
    with engine.connect() as conn:
        return conn.execute(select(table).order_by(table.c.updated_at)).all()


def clocked(event, seconds: float):
    """`event` as a host whose clock read t0 + `seconds` stamps it."""
    return event.model_copy(update={"occurred_at": datetime(2026, 3, 1, tzinfo=UTC) + timedelta(seconds=seconds)})


def later_on_the_log_from_a_lagging_host(settings, earlier, later) -> None:
    """`earlier` then `later` appended, `later` stamped 5 s before `earlier` and its id minted first (the ids
    are UUIDv7s of the same clocks): set later, by an API host, or a worker, whose clock runs behind."""
    lagging = clocked(later(), 5)  # minted first: its id is the smaller too
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync(
        [WorkspaceCreated(workspace_id="w", producer=P), SessionCreated(workspace_id="w", session_id="s1", producer=P)]
    )
    log.append_sync([clocked(earlier(), 10)])
    log.append_sync([lagging])
    log.close()


async def read_when(settings, table, rows: int, read):
    engine = async_engine(settings.database)
    try:
        eventually(lambda: count(sync_engine(settings.database), table) == rows)
        async with engine.connect() as conn:
            return await read(conn)
    finally:
        await engine.dispose()


async def test_the_session_level_read_is_the_last_set_on_the_log_whatever_the_clocks_say(settings, projector):
    # reads showed the level the summarizer and router had overridden
    def configured(on: bool):
        return lambda: SessionConfigured(
            workspace_id="w", session_id="s1", configuration=Configuration(summaries=on), producer=P
        )

    later_on_the_log_from_a_lagging_host(settings, configured(True), configured(False))
    got = await read_when(settings, configurations, 2, lambda conn: levels(conn, "w", "s1"))
    assert got.session.summaries is False


async def test_messages_are_stamped_with_the_last_workspace_level_on_the_log_whatever_the_clocks_say(
    settings, projector
):
    # every message went on carrying reasoning on, after an admin turned it off from a lagging host
    def configured(on: bool):
        return lambda: WorkspaceConfigured(workspace_id="w", configuration=Configuration(reasoning=on), producer=P)

    later_on_the_log_from_a_lagging_host(settings, configured(True), configured(False))
    facts = await read_when(
        settings, configurations, 2, lambda conn: append_reads.append_facts(conn, "w", "s1", ["alice"])
    )
    assert facts.workspace_level.reasoning is False


async def test_the_card_read_is_the_last_set_on_the_log_whatever_the_clocks_say(settings, projector):
    # SetPeerCard's own reply, GetPeerCard and GetContext showed the card it replaced
    def card(name: str):
        pair = dict(workspace_id="w", observer_id="bob", observed_id="bob", producer=P)
        return lambda: PeerCardUpdated(**pair, entries=(f"IDENTITY: {name}",))

    later_on_the_log_from_a_lagging_host(settings, card("Bob"), card("Robert"))
    got = await read_when(settings, peer_cards, 2, lambda conn: peer_reads.peer_card(conn, "w", "bob", "bob"))
    assert got["entries"] == ["IDENTITY: Robert"]


def test_a_projector_fenced_by_another_under_its_instance_id_exits_nonzero(settings, tmp_path):
    # the fatal error was logged as a warning and dropped: the process stayed alive projecting nothing, and
    # no supervisor restarted it
    engine = sync_engine(settings.database)
    create_schema(engine, settings.database.schema_name)
    env = {"PEERLOG_PROJECTOR_INSTANCE_ID": "projector-1"}
    first = Worker(settings, tmp_path / "first.log", env, command="projector run").start()
    second = Worker(settings, tmp_path / "second.log", env, command="projector run")
    try:
        time.sleep(8)  # the first has joined the group
        second.start()
        eventually(lambda: first.proc.poll() is not None, timeout=90)
        assert first.proc.returncode != 0
        assert "fenced" in (tmp_path / "first.log").read_text().lower()
    finally:
        second.stop()
        first.stop()
