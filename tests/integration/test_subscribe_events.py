"""Subscribe over real Kafka and Postgres: one workspace's events of the chosen types in log order, and a
stream cut off and resumed from the last cursor it delivered misses nothing, including what was written
while it was away."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import UTC, datetime

import grpc
import numpy as np
import pytest

from peerlog.v1 import events_pb2, events_pb2_grpc
from services.api.server import start
from services.bus.subscription import log_topics
from services.cli.client import Client
from services.events import MessageAppended, ProducerInfo, encode
from services.events.requests import KeyedRequest
from services.llm.embeddings import LocalOnnxEmbedder
from tests.support.auth import admin_channel
from tests.support.rpc import rejected


async def take(stub, n: int, timeout: float = 30.0, until=None, **request) -> list[events_pb2.SubscribedEvent]:
    """The first n events of a fresh stream (or the first for which `until` holds), then it is cancelled."""
    call = stub.Subscribe(events_pb2.SubscribeRequest(**request))
    got = []
    until = until or (lambda seen: len(seen) == n)
    try:
        async with asyncio.timeout(timeout):
            async for event in call:
                got.append(event)
                if until(got):
                    break
    finally:
        call.cancel()
    return got


def contents(events) -> list[str]:
    return [json.loads(e.json)["content"] for e in events]


def contents_of(events) -> list[str]:
    return contents(e for e in events if e.type == "MessageAppended")


def append_keyed(settings, texts: list[str], request_id: str, key: str = "k") -> None:
    """An AddMessages append of `texts` by alice in w/s under idempotency key `key`, straight onto the log, as
    an API writes one; the same key again with another request id is a retry's copy (its API died before
    projecting the first), with new event and message ids."""
    from confluent_kafka import Producer

    from services.bus.topics import SESSIONS

    request = KeyedRequest(key=key, scope="w/s", fingerprint="f", request_id=request_id)
    raw = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers})
    for text in texts:
        event = MessageAppended(
            workspace_id="w",
            session_id="s",
            message_id=f"{request_id}-{text}",
            peer_id="alice",
            content=text,
            created_at=datetime.now(UTC),
            producer=ProducerInfo(component="test", version="1"),
            request=request,
        )
        raw.produce(SESSIONS.full_name(settings.kafka.topic_prefix), encode(event), key=b"w/s")
    assert raw.flush(10) == 0


@pytest.fixture
async def conversation(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    await c.setup_conversation("elsewhere", "s", peers=("alice", "bob"))
    await c.add("elsewhere", "s", [("alice", "not yours")])
    await c.add("w", "s", [("alice", "one"), ("bob", "two")])
    await c.add("w", "s", [("alice", "three")])
    return c, events_pb2_grpc.EventServiceStub(channel)


async def test_a_subscription_delivers_its_workspace_events_of_the_chosen_types_in_log_order(conversation):
    _, stub = conversation
    events = await take(stub, 3, workspace_id="w", event_types=["MessageAppended"])
    assert contents(events) == ["one", "two", "three"]
    current = MessageAppended.schema_version_current
    assert {(e.type, e.schema_version, e.key) for e in events} == {("MessageAppended", current, "w/s")}
    offsets = [e.position.offset for e in events]
    assert offsets == sorted(offsets) and len({e.position.partition for e in events}) == 1
    # with no filter: every topic (in no order between topics), every message too, and nothing of elsewhere
    kinds = {"WorkspaceCreated", "PeerCreated", "SessionCreated", "MemberJoined"}
    everything = await take(
        stub, 0, workspace_id="w", until=lambda seen: len(contents_of(seen)) == 3 and kinds <= {e.type for e in seen}
    )
    assert {json.loads(e.json)["workspace_id"] for e in everything} == {"w"}


async def test_a_stream_resumed_from_its_last_cursor_misses_nothing_written_while_it_was_away(conversation):
    c, stub = conversation
    first = await take(stub, 2, workspace_id="w", event_types=["MessageAppended"])
    assert contents(first) == ["one", "two"]
    await c.add("w", "s", [("bob", "four")])  # while no one listens
    rest = take(stub, 3, workspace_id="w", event_types=["MessageAppended"], cursor=first[-1].cursor)
    resumed = asyncio.ensure_future(rest)
    await asyncio.sleep(1)
    await c.add("w", "s", [("alice", "five")])  # while the resumed stream waits at the end of the log
    assert contents(await resumed) == ["three", "four", "five"]


async def test_from_end_delivers_only_what_is_written_after_the_stream_starts(conversation):
    c, stub = conversation
    later = asyncio.ensure_future(take(stub, 1, workspace_id="w", event_types=["MessageAppended"], from_end=True))
    written = []
    while not later.done():  # written until the stream, at the ends of its partitions, delivers one
        written.append(f"new-{len(written)}")
        await c.add("w", "s", [("bob", written[-1])])
        await asyncio.wait([later], timeout=0.2)
    assert contents(await later)[0] in written  # not one, two or three, written before it started


async def test_unknown_event_types_and_foreign_cursors_are_refused(conversation):
    _, stub = conversation
    await rejected(
        take(stub, 1, workspace_id="w", event_types=["MessageSent"]), grpc.StatusCode.INVALID_ARGUMENT, "MessageSent"
    )
    bad = events_pb2.EventCursor(positions=[events_pb2.LogPosition(topic="someone.else", partition=0, offset=0)])
    await rejected(take(stub, 1, workspace_id="w", cursor=bad), grpc.StatusCode.INVALID_ARGUMENT, "someone.else")


async def test_a_from_end_stream_resumed_from_its_cursor_misses_nothing_and_replays_nothing_older(conversation):
    c, stub = conversation
    sessions = [f"s{i}" for i in range(8)]  # keys on every partition, not only the one "live" is read from
    for s in sessions:
        await c.session("w", s, members=("alice",))
        await c.add("w", s, [("alice", f"old-{s}")])
    later = asyncio.ensure_future(take(stub, 1, workspace_id="w", event_types=["MessageAppended"], from_end=True))
    while not later.done():  # written until the stream, at the ends of its partitions, delivers one
        await c.add("w", "s", [("alice", "live")])
        await asyncio.wait([later], timeout=0.2)
    (live,) = await later
    assert contents([live]) == ["live"]
    for s in sessions:  # while no one listens
        await c.add("w", s, [("alice", f"away-{s}")])
    away = {f"away-{s}" for s in sessions}

    def all_away(seen):
        return away <= set(contents_of(seen))

    resume = {"workspace_id": "w", "event_types": ["MessageAppended"], "cursor": live.cursor}
    kept_at_end = await take(stub, 0, 20, all_away, from_end=True, **resume)
    resumed = await take(stub, 0, 20, all_away, **resume)
    assert len({e.position.partition for e in resumed if contents([e])[0] in away}) > 1
    # each partition in log order: an old event replayed would have come before that partition's away one
    assert not [m for m in contents_of(kept_at_end + resumed) if m.startswith("old-")]


async def test_a_cursor_naming_a_partition_its_topic_does_not_have_is_refused(conversation, settings):
    _, stub = conversation
    topic = log_topics(settings.kafka)[0]
    bad = events_pb2.EventCursor(positions=[events_pb2.LogPosition(topic=topic, partition=999, offset=5)])
    await rejected(take(stub, 1, workspace_id="w", cursor=bad), grpc.StatusCode.INVALID_ARGUMENT, f"{topic}/999")


async def test_subscribing_to_a_workspace_that_does_not_exist_is_not_found(conversation):
    _, stub = conversation
    await rejected(take(stub, 1, workspace_id="nope"), grpc.StatusCode.NOT_FOUND, "'nope'")


async def test_one_workspaces_streams_past_its_limit_are_refused_and_leave_room_for_another(conversation, settings):
    limits = {"max_subscriptions": 2, "max_subscriptions_per_workspace": 1}
    server = await start(settings.model_copy(update={"api": settings.api.model_copy(update=limits)}))
    try:
        async with admin_channel(settings, server.port) as chan:
            stub = events_pb2_grpc.EventServiceStub(chan)
            hog = stub.Subscribe(events_pb2.SubscribeRequest(workspace_id="elsewhere"))
            async with asyncio.timeout(30):
                await hog.read()  # open: it holds its place
            await rejected(
                take(stub, 1, workspace_id="elsewhere"),
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "PEERLOG_API_MAX_SUBSCRIPTIONS_PER_WORKSPACE",
            )
            events = await take(stub, 1, workspace_id="w", event_types=["MessageAppended"])
            assert contents(events) == ["one"]
            hog.cancel()
    finally:
        await server.stop(0)


async def test_a_vector_arrives_as_base64_of_the_float32_values_the_embedding_model_gave(conversation):
    """What the README's Events section promises a subscriber: decode the base64, read little-endian float32."""
    c, stub = conversation
    made = await c.create_observations("w", "alice", "bob", ["Bob keeps bees on the roof"])
    (event,) = await take(stub, 1, workspace_id="w", event_types=["ObservationAdded"])
    body = json.loads(event.json)
    assert body["observation_id"] == made.observation_ids[0] and isinstance(body["embedding"], str)
    got = np.frombuffer(base64.b64decode(body["embedding"]), dtype="<f4")
    expected = np.asarray(LocalOnnxEmbedder().embed_sync(["Bob keeps bees on the roof"])[0], dtype=np.float32)
    assert got.shape == (384,) and np.allclose(got, expected, atol=1e-6)


def test_subscribing_while_the_broker_is_away_is_unavailable_to_retry_not_internal():
    # a broker restarting is when clients reconnect; the stream answered INTERNAL ("a bug"), which they do
    # not retry, where the client library documents UNAVAILABLE: start again from the last cursor
    from infra.processes import free_port
    from services.bus.settings import KafkaSettings
    from services.bus.subscription import Filter, LogSubscription
    from services.errors import Unavailable

    away = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}")  # nothing listens there
    subscription = LogSubscription(away, Filter(workspace_id="w"), {})
    try:
        with pytest.raises(Unavailable, match="subscribe again from your last cursor"):
            subscription.start()
    finally:
        subscription.close()


async def test_an_event_newer_than_this_api_ends_the_stream_before_it_instead_of_being_skipped(conversation, settings):
    """Skipped, the cursor moved past it and the event was never delivered, even once the API was upgraded."""
    from confluent_kafka import Producer

    from services.bus.topics import SESSIONS
    from services.events import ProducerInfo, encode

    c, stub = conversation
    newer = MessageAppended(
        workspace_id="w",
        session_id="s",
        message_id="from-the-future",
        peer_id="bob",
        content="written by a newer peerlog",
        created_at=datetime.now(UTC),
        producer=ProducerInfo(component="test", version="9"),
    )
    current = f'"schema_version":{MessageAppended.schema_version_current}'.encode()
    raw = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers})
    raw.produce(
        SESSIONS.full_name(settings.kafka.topic_prefix),
        encode(newer).replace(current, b'"schema_version":99'),
        key=b"w/s",
    )
    assert raw.flush(10) == 0
    await c.add("w", "s", [("alice", "after it")])
    await c.peer("w", "carol")
    await c.session("w", "s", members=["carol"])  # on the same partition, after it too
    got, call = [], stub.Subscribe(events_pb2.SubscribeRequest(workspace_id="w", event_types=["MessageAppended"]))
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        async with asyncio.timeout(30):
            async for event in call:
                got.append(event)
    assert contents(got) == ["one", "two", "three"]  # "after it" is not delivered past the unread event
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE and "upgrade" in ended.value.details()
    # a stream of types it does not take goes on past it
    joins = await take(stub, 3, workspace_id="w", event_types=["MemberJoined"])
    assert [json.loads(e.json)["peer_id"] for e in joins][-1] == "carol"


async def test_a_cursor_past_a_partitions_end_is_invalid_argument(conversation):
    """Accepted, the broker answered "out of range", librdkafka jumped to the end, and everything written up
    to the cursor's offset was never delivered: a log re-created or restored under a client's cursor."""
    _, stub = conversation
    (first,) = await take(stub, 1, workspace_id="w", event_types=["MessageAppended"])
    topic, partition = first.position.topic, first.position.partition
    ahead = events_pb2.EventCursor()
    ahead.CopyFrom(first.cursor)
    (position,) = [p for p in ahead.positions if (p.topic, p.partition) == (topic, partition)]
    position.offset = 1000
    await rejected(
        take(stub, 1, 10, workspace_id="w", event_types=["MessageAppended"], cursor=ahead),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"offset 1000 of {topic!r} partition {partition}, beyond the log's end",
        "empty cursor",
    )


async def test_a_stream_whose_position_the_log_no_longer_holds_ends_failed_precondition_instead_of_skipping(
    conversation, settings
):
    """Records deleted under a cursor: librdkafka jumped to the end, past what was written since, unsaid."""
    from confluent_kafka import OFFSET_END, TopicPartition

    from services.bus.admin import admin_client

    c, stub = conversation
    (first,) = await take(stub, 1, workspace_id="w", event_types=["MessageAppended"])
    here = TopicPartition(first.position.topic, first.position.partition, OFFSET_END)
    admin = admin_client(settings.kafka)  # held: a client collected mid-request never completes its futures
    for deleted in admin.delete_records([here]).values():
        deleted.result(30)
    await c.add("w", "s", [("bob", "after the deletion")])
    got, call = [], stub.Subscribe(events_pb2.SubscribeRequest(workspace_id="w", cursor=first.cursor))
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        async with asyncio.timeout(10):
            async for event in call:
                got.append(event)
    assert ended.value.code() == grpc.StatusCode.FAILED_PRECONDITION, ended.value.details()
    assert f"no longer holds offset {first.position.offset + 1}" in ended.value.details()
    assert "after the deletion" not in contents_of(got)


async def test_a_repeated_keyed_append_reaches_no_subscriber_live_or_resumed_between_the_copies(conversation, settings):
    """peerlog keeps only the first append under a key: a stream delivering a retry's copy gave ids that
    GetMessage says do not exist, and an event_id check cannot tell the copy from a new write."""
    c, stub = conversation
    append_keyed(settings, ["kept-1", "kept-2"], "first")
    first = await take(stub, 5, workspace_id="w", event_types=["MessageAppended"])
    assert contents(first)[-2:] == ["kept-1", "kept-2"]
    append_keyed(settings, ["copy-1", "copy-2"], "retry")  # the client's retry: same key, a new request id
    append_keyed(settings, ["other"], "another", key="k2")
    await c.add("w", "s", [("bob", "after")])

    def after(seen):
        return "after" in contents(seen)

    live = await take(stub, 0, until=after, workspace_id="w", event_types=["MessageAppended"])
    assert contents(live) == ["one", "two", "three", "kept-1", "kept-2", "other", "after"]
    # resumed after the first copy, which it never reads: it reads the log back to know the key was used
    resumed = await take(
        stub, 0, until=after, workspace_id="w", event_types=["MessageAppended"], cursor=first[-1].cursor
    )
    assert contents(resumed) == ["other", "after"]
