"""A write whose commit the broker did not confirm (AppendUnresolved) may stand: its entity stays held until
its transaction has ended and, if it was committed, until it is readable."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
from confluent_kafka import Producer
from sqlalchemy import select

from peerlog.v1 import common_pb2, messages_pb2, sessions_pb2
from projections.db import sync_engine
from projections.schema import messages
from services.bus.consistency import ConsistencyToken
from services.bus.producer import AppendUnresolved
from services.bus.streams import committed
from services.bus.topics import OBSERVATIONS, SESSIONS
from tests.integration.test_idempotent_writes import servers  # noqa: F401 (a fixture)
from tests.support.wait import until_true


def open_transaction(
    settings, spec=SESSIONS, value: bytes = b"not an event", key: bytes = b"w/s"
) -> tuple[Producer, ConsistencyToken]:
    """A transaction holding one record on a topic of `spec`, left open: its producer and the record's place."""
    producer = Producer(
        {"bootstrap.servers": settings.kafka.bootstrap_servers, "transactional.id": f"test-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    placed = []
    producer.produce(
        spec.full_name(settings.kafka.topic_prefix),
        value,
        key=key,
        on_delivery=lambda err, msg: placed.append((msg.topic(), msg.partition(), msg.offset())),
    )
    assert producer.flush(30) == 0 and len(placed) == 1
    return producer, ConsistencyToken.of(placed)


def test_an_unconfirmed_commits_outcome_is_known_once_its_transaction_ends(settings):
    kept, kept_at = open_transaction(settings)
    assert committed(settings.kafka, kept_at, wait_s=0.5) is None  # still open: nobody can say yet
    kept.commit_transaction(30)
    assert committed(settings.kafka, kept_at, wait_s=5) is True

    dropped, dropped_at = open_transaction(settings)
    dropped.abort_transaction(30)
    assert committed(settings.kafka, dropped_at, wait_s=5) is False
    assert committed(settings.kafka, ConsistencyToken.of([]), wait_s=5) is False  # nothing reached the log


async def test_a_clone_whose_commit_was_not_confirmed_keeps_its_target_so_a_second_clone_copies_nothing_again(
    settings,
    servers,  # noqa: F811
    projector,
):
    (sa, a), (_, b) = await servers(consistency_wait_s=2.0), await servers(consistency_wait_s=2.0)
    await a.setup_conversation("acme", "src")
    added = await a.add("acme", "src", [("alice", "one"), ("bob", "two"), ("alice", "three")])
    clone = sessions_pb2.CloneSessionRequest(
        workspace_id="acme",
        session_id="src",
        new_session_id="copy",
        consistency=common_pb2.ReadConsistency(consistency_token=added.consistency_token),  # the source, whole
    )
    projector.stop()
    try:
        with unconfirmed(sa):
            with_a = await _answer(a.sessions.CloneSession(clone, timeout=30))
        with_b = await _answer(b.sessions.CloneSession(clone, timeout=30))
    finally:
        projector.start()
    # once its transaction was known committed, the first is a write that stands, not yet readable
    assert with_a.code() == grpc.StatusCode.UNAVAILABLE and "it stands" in with_a.details()
    # the second waited for the first's lock: told it wrote nothing, or, once readable, that the id is taken
    assert with_b.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ALREADY_EXISTS), with_b.details()
    await until_true(lambda: len(stored(settings, messages.c.session_id == "copy")) >= 3, 60)
    await asyncio.sleep(1.0)  # for a second copy, had there been one
    assert sorted(stored(settings, messages.c.session_id == "copy")) == ["one", "three", "two"]  # copied once


async def test_a_message_whose_commit_was_not_confirmed_keeps_its_id_so_another_write_of_it_is_not_acknowledged(
    settings,
    servers,  # noqa: F811
    projector,
):
    (sa, a), (_, b) = await servers(consistency_wait_s=2.0), await servers(consistency_wait_s=2.0)
    await a.setup_conversation("w", "s", peers=("alice",))

    def request(content: str) -> messages_pb2.AddMessagesRequest:
        new = messages_pb2.NewMessage(peer_id="alice", content=content, message_id="m-1")
        return messages_pb2.AddMessagesRequest(workspace_id="w", session_id="s", messages=[new])

    projector.stop()
    try:
        with unconfirmed(sa):
            with_a = await _answer(a.messages.AddMessages(request("first"), timeout=30))
        second = asyncio.ensure_future(_answer(b.messages.AddMessages(request("second"), timeout=30)))
        await asyncio.sleep(0.5)
    finally:
        projector.start()
    with_b = await second
    await asyncio.sleep(2.0)
    assert stored(settings, messages.c.message_id == "m-1") == ["first"]
    assert with_a.code() == grpc.StatusCode.UNAVAILABLE and "is on the log" in with_a.details()
    assert with_b.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ALREADY_EXISTS), with_b.details()


@contextmanager
def unconfirmed(server, aborted=None) -> Iterator[None]:
    """`server`'s appends commit, and then raise AppendUnresolved, as when the broker's answer to a commit
    is lost: the write stands, and its writer cannot know it. With `aborted` (the settings), an append
    writes nothing of its own: it points at a transaction of another producer that aborts."""
    append = server.ctx.log.append

    async def committed_unconfirmed(events):
        raise AppendUnresolved("the log did not confirm whether the write was committed", await append(events))

    async def aborted_unconfirmed(events):
        producer, placed = open_transaction(aborted)
        producer.abort_transaction(30)
        raise AppendUnresolved("the log did not confirm whether the write was committed", placed)

    server.ctx.log.append = aborted_unconfirmed if aborted is not None else committed_unconfirmed
    try:
        yield
    finally:
        server.ctx.log.append = append


def stored(settings, where) -> list[str]:
    """The content of the projected messages `where` selects."""
    engine = sync_engine(settings.database)
    try:
        with engine.connect() as conn:
            return list(conn.scalars(select(messages.c.content).where(where)))
    finally:
        engine.dispose()


async def test_a_write_whose_commit_was_not_confirmed_answers_as_the_log_decided(settings, servers):  # noqa: F811
    server, c = await servers()
    await c.setup_conversation("w", "s", peers=("alice",))
    new = messages_pb2.NewMessage(peer_id="alice", content="kept", message_id="m-kept")
    with unconfirmed(server):  # committed: the call answers with its ids, readable, as any write
        kept = await c.messages.AddMessages(
            messages_pb2.AddMessagesRequest(workspace_id="w", session_id="s", messages=[new]), timeout=30
        )
    assert list(kept.message_ids) == ["m-kept"]
    assert [m.content for m in (await c.list_messages("w", "s", token=kept.consistency_token)).messages] == ["kept"]

    with unconfirmed(server, aborted=settings):  # aborted: nothing was written, and the call says so
        told = await _answer(c.add("w", "s", [("alice", "dropped")]))
    assert told.code() == grpc.StatusCode.UNAVAILABLE and "nothing was written; send it again" in told.details()
    await asyncio.sleep(1.0)
    assert stored(settings, messages.c.content == "dropped") == []


async def test_a_plain_write_whose_commit_stays_unknown_is_answered_within_the_consistency_wait(
    settings,
    servers,  # noqa: F811
):
    server, c = await servers(consistency_wait_s=2.0)
    await c.setup_conversation("w", "s", peers=("alice",))
    hung, hung_at = open_transaction(settings, OBSERVATIONS)  # a transaction nobody ends during the call
    try:
        with pointed_at(server, hung_at):
            asked = time.monotonic()
            told = await _answer(c.add("w", "s", [("alice", "unknown")]))
        assert time.monotonic() - asked < 6
        assert told.code() == grpc.StatusCode.DEADLINE_EXCEEDED and "did not confirm" in told.details()
    finally:
        hung.abort_transaction(30)


async def test_writes_looking_at_an_open_transaction_do_not_hold_up_one_whose_commit_is_known(
    settings,
    servers,  # noqa: F811
):
    server, c = await servers(consistency_wait_s=30.0)
    await c.setup_conversation("w", "s", peers=("alice",))
    hung, hung_at = open_transaction(settings, OBSERVATIONS)
    try:
        with pointed_at(server, hung_at):  # four writes keep looking at a transaction still open
            stuck = [asyncio.ensure_future(c.add("w", "s", [("alice", f"stuck {i}")])) for i in range(4)]
            await asyncio.sleep(1.0)
        with unconfirmed(server):
            asked = time.monotonic()
            await c.add("w", "s", [("alice", "committed")])
        assert time.monotonic() - asked < 2  # one look answers it: the others do not queue it
    finally:
        hung.abort_transaction(30)
        await asyncio.gather(*stuck, return_exceptions=True)


@contextmanager
def pointed_at(server, positions: ConsistencyToken) -> Iterator[None]:
    """`server`'s appends write nothing and raise AppendUnresolved pointing at `positions`."""
    append = server.ctx.log.append

    async def unknown(events):
        raise AppendUnresolved("the log did not confirm whether the write was committed", positions)

    server.ctx.log.append = unknown
    try:
        yield
    finally:
        server.ctx.log.append = append


async def _answer(call) -> grpc.aio.AioRpcError:
    try:
        await call
    except grpc.aio.AioRpcError as err:
        return err
    raise AssertionError("the call answered OK")
