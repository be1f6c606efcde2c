"""Idempotent writes (issue 10 §2): a repeat under a key returns the first reply and appends nothing,
across lost replies, racing API servers and restarts; another request under a used key is refused."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from peerlog.v1 import (
    configuration_pb2,
    messages_pb2,
    messages_pb2_grpc,
    observations_pb2,
    peers_pb2,
    peers_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
    workspaces_pb2,
    workspaces_pb2_grpc,
)
from projections.rebuild import rebuild
from services.api import convert, idempotency
from services.api.channels import channel
from services.bus.topics import DIRECTORY, MESSAGE_EMBEDDINGS, OBSERVATIONS, PERCEIVED, SESSIONS
from services.cli.client import Client
from services.events import MessageAppended, MessagePerceived, MessagesEmbedded, ObservationAdded, PeerMetadataSet
from services.events.requests import KeyedRequest
from tests.integration.test_api_processes import two_process_api  # noqa: F401 (a fixture)
from tests.support.auth import admin_channel
from tests.support.log import read_events
from tests.support.rpc import rejected


@pytest.fixture
async def servers(settings, projector):
    """Start API servers on demand: each its own process state (pools, locks, log producers)."""
    from services.api.server import start

    opened = []

    async def open_server(**api):
        server = await start(settings.model_copy(update={"api": settings.api.model_copy(update=api)}))
        chan = admin_channel(settings, server.port)
        opened.append((server, chan))
        return server, Client(chan)

    yield open_server
    for server, chan in opened:
        await chan.close()
        await server.stop(0)


def add_request(key: str, *contents: str, session: str = "s") -> messages_pb2.AddMessagesRequest:
    return messages_pb2.AddMessagesRequest(
        workspace_id="w",
        session_id=session,
        idempotency_key=key,
        messages=[messages_pb2.NewMessage(peer_id="alice", content=c) for c in contents],
    )


def logged(settings, spec, kind, count: int) -> list:
    """The events of `kind` on the log once `count` are there, and after a second more (for any extra)."""
    events = read_events(settings, spec, lambda es: sum(isinstance(e, kind) for e in es) >= count, settle=1.0)
    return [e for e in events if isinstance(e, kind)]


async def stored(c: Client, token: str = "") -> list[str]:
    return [m.message_id for m in (await c.list_messages("w", "s", token=token)).messages]


async def test_a_reply_lost_after_commit_is_retried_and_leaves_one_copy(settings, servers, projector):
    server, c = await servers()
    await c.setup_conversation("w", "s", peers=("alice",))
    projector.stop()  # the retry then falls in the window: appended, not yet projected
    append = server.ctx.log.append

    async def commit_then_stall(events):  # the log has it; the reply is late past the client's deadline
        token = await append(events)
        await asyncio.sleep(1.5)
        return token

    server.ctx.log.append = commit_then_stall
    request = add_request("k-lost", "one", "two")
    with pytest.raises(grpc.aio.AioRpcError) as lost:
        await c.messages.AddMessages(request, timeout=0.5)
    assert lost.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    retry = asyncio.ensure_future(c.messages.AddMessages(request, timeout=60))
    await asyncio.sleep(2.5)  # the first has committed and let go of the key
    assert not retry.done()  # the first holds the key until its append is projected
    projector.start()
    retried = await retry
    assert len(retried.message_ids) == 2
    assert await stored(c, retried.consistency_token) == list(retried.message_ids)
    assert (await c.messages.AddMessages(request)) == retried
    assert [e.message_id for e in logged(settings, SESSIONS, MessageAppended, 2)] == list(retried.message_ids)


async def test_a_keyed_write_not_yet_projected_answers_unavailable_and_a_retry_gets_its_reply(
    settings, servers, projector
):
    _, c = await servers(consistency_wait_s=2.0)
    await c.setup_conversation("w", "s", peers=("alice",))
    projector.stop()
    request = add_request("k-slow", "on the log, not yet readable")
    await rejected(
        c.messages.AddMessages(request, timeout=30),
        grpc.StatusCode.UNAVAILABLE,
        "is on the log but not readable",
        "retry with the same key",
    )

    async def retried():  # as the client library does: UNAVAILABLE again, while the projector restarts
        for _ in range(30):
            try:
                return await c.messages.AddMessages(request, timeout=60)
            except grpc.aio.AioRpcError as err:
                assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()

    retry = asyncio.ensure_future(retried())
    await asyncio.sleep(1.0)
    assert not retry.done()  # the key stays locked until the first append is projected
    projector.start()
    reply = await retry
    assert await stored(c, reply.consistency_token) == list(reply.message_ids)
    assert len(logged(settings, SESSIONS, MessageAppended, 1)) == 1


async def test_an_unkeyed_post_behind_a_member_change_not_yet_readable_answers_unavailable_and_appends_nothing(
    settings, servers, projector
):
    # it waited for the session's lock without end: hung until the client's deadline, DEADLINE_EXCEEDED
    # (which means "may be committed") though nothing was written
    _, c = await servers(consistency_wait_s=2.0)
    await c.setup_conversation("w", "s", peers=("alice",))
    await c.peer("w", "carol")
    projector.stop()  # the member change below holds the session's lock until it is readable
    add = sessions_pb2.AddMembersRequest(
        workspace_id="w", session_id="s", members=[sessions_pb2.MemberSpec(peer_id="carol")]
    )
    await rejected(c.sessions.AddMembers(add, timeout=30), grpc.StatusCode.UNAVAILABLE)
    started = time.monotonic()
    await rejected(
        c.messages.AddMessages(add_request("", "behind the member change"), timeout=30),
        grpc.StatusCode.UNAVAILABLE,
        "appended nothing",
        "a change of the session's members",
    )
    assert time.monotonic() - started < 20  # the consistency wait, not the client's deadline
    projector.start()
    reply = await c.messages.AddMessages(add_request("", "after it"), timeout=60)
    assert [e.message_id for e in logged(settings, SESSIONS, MessageAppended, 1)] == list(reply.message_ids)


async def test_retries_told_nothing_was_written_give_up_their_lock_slots_so_an_unrelated_key_still_appends(
    settings, servers, projector
):
    server, c = await servers(consistency_wait_s=1.0)
    await c.setup_conversation("w", "s", peers=("alice",))
    projector.stop()
    try:
        first = add_request("k-busy", "first")
        await rejected(c.messages.AddMessages(first, timeout=30), grpc.StatusCode.UNAVAILABLE, "is on the log")
        # more retries than the process has lock slots, each told it appended nothing
        retries = [c.messages.AddMessages(first, timeout=30) for _ in range(server.ctx.engine.pool.size() + 1)]
        for told in await asyncio.gather(*retries, return_exceptions=True):
            assert "this call appended nothing" in told.details()
        await rejected(  # on the log, rather than refused for want of a slot the abandoned retries kept
            c.messages.AddMessages(add_request("k-unrelated", "other"), timeout=30),
            grpc.StatusCode.UNAVAILABLE,
            "is on the log but not readable",
        )
    finally:
        projector.start()
    assert len(logged(settings, SESSIONS, MessageAppended, 2)) == 2


async def test_concurrent_calls_with_one_key_on_two_servers_give_one_copy_and_one_reply(settings, servers):
    (_, a), (_, b) = await servers(), await servers()
    await a.setup_conversation("w", "s", peers=("alice",))
    request = add_request("k-race", "only once")
    replies = await asyncio.gather(*(c.messages.AddMessages(request) for c in (a, b, a, b)))
    assert all(r == replies[0] for r in replies), replies
    assert await stored(b, replies[0].consistency_token) == list(replies[0].message_ids)
    assert len(logged(settings, SESSIONS, MessageAppended, 1)) == 1


async def test_a_different_request_under_a_used_key_is_refused_and_appends_nothing(settings, servers):
    _, c = await servers()
    await c.setup_conversation("w", "s", peers=("alice",))
    first = await c.messages.AddMessages(add_request("k-used", "hello"))
    # at once (the first may not be projected yet), and once it is
    for attempt in (add_request("k-used", "something else"), add_request("k-used", "hello", "more")):
        await rejected(
            c.messages.AddMessages(attempt),
            grpc.StatusCode.FAILED_PRECONDITION,
            "idempotency key 'k-used' was already used",
            "different request",
        )
    # the same key in another session is another write: keys are per session
    await c.session("w", "s2", members=["alice"])
    other = await c.messages.AddMessages(add_request("k-used", "hello", session="s2"))
    assert set(other.message_ids).isdisjoint(first.message_ids)
    assert await stored(c, first.consistency_token) == list(first.message_ids)
    assert [e.content for e in logged(settings, SESSIONS, MessageAppended, 2)] == ["hello", "hello"]


async def test_a_repeat_after_an_api_restart_returns_the_first_reply(settings, servers):
    server, c = await servers()
    await c.setup_conversation("w", "s", peers=("alice",))
    first = await c.messages.AddMessages(add_request("k-restart", "before the restart"))
    await server.stop(0)
    _, again = await servers()
    assert (await again.messages.AddMessages(add_request("k-restart", "before the restart"))) == first
    assert len(logged(settings, SESSIONS, MessageAppended, 1)) == 1


async def test_client_message_ids_are_kept_and_must_be_new_unless_the_same_call_is_sent_again(settings, servers):
    _, c = await servers()
    await c.setup_conversation("w", "s", peers=("alice",))

    def request(content: str = "mine", **kw) -> messages_pb2.AddMessagesRequest:
        new = messages_pb2.NewMessage(peer_id="alice", content=content, message_id="client-1", **kw)
        return messages_pb2.AddMessagesRequest(workspace_id="w", session_id="s", messages=[new])

    reply = await c.messages.AddMessages(request())
    assert list(reply.message_ids) == ["client-1"]
    await stored(c, reply.consistency_token)
    # what a call that timed out while appending is told to do: it got ALREADY_EXISTS, as for a clash
    again = await c.messages.AddMessages(request())
    assert list(again.message_ids) == ["client-1"]
    assert len(logged(settings, SESSIONS, MessageAppended, 1)) == 1  # written once
    await rejected(
        c.messages.AddMessages(request("not mine")), grpc.StatusCode.ALREADY_EXISTS, "'client-1'", "must be new"
    )
    backdated = request(created_at=Timestamp(seconds=1_600_000_000))
    await rejected(c.messages.AddMessages(backdated), grpc.StatusCode.ALREADY_EXISTS, "'client-1'")
    # an opt-out added is no resend: answered with the ids, the client would think it applied
    opted_out = request(configuration=configuration_pb2.Configuration(reasoning=False))
    await rejected(c.messages.AddMessages(opted_out), grpc.StatusCode.ALREADY_EXISTS, "'client-1'")


def struct(**values) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(values)
    return s


# a Struct holds every number as a double; jsonb keeps this one as 1733600000123456800, which reads back
# as an int that Python's == finds unequal to the double (1733600000123456768 exactly)
NANOS = 1_733_600_000_123_456_789


async def test_an_unchanged_resend_with_large_numbers_in_metadata_returns_its_ids(settings, servers):
    _, c = await servers()
    await c.setup_conversation("w", "s", peers=("alice",))

    def request(**metadata) -> messages_pb2.AddMessagesRequest:
        new = messages_pb2.NewMessage(peer_id="alice", content="hi", message_id="client-1", metadata=struct(**metadata))
        return messages_pb2.AddMessagesRequest(workspace_id="w", session_id="s", messages=[new])

    sent = {"sent_ns": NANOS, "ratio": 0.1, "count": 3, "big": 1e300}
    reply = await c.messages.AddMessages(request(**sent))
    await stored(c, reply.consistency_token)
    again = await c.messages.AddMessages(request(**sent))
    assert list(again.message_ids) == ["client-1"]
    assert len(logged(settings, SESSIONS, MessageAppended, 1)) == 1  # written once
    changed = request(**{**sent, "sent_ns": NANOS + 10_000})  # another double: a real change is no resend
    await rejected(c.messages.AddMessages(changed), grpc.StatusCode.ALREADY_EXISTS, "'client-1'")


async def test_setting_the_same_large_number_peer_metadata_twice_appends_one_event(settings, servers):
    _, c = await servers()
    await c.setup_conversation("w", "s", peers=("alice",))

    def request(**metadata) -> peers_pb2.SetPeerMetadataRequest:
        return peers_pb2.SetPeerMetadataRequest(workspace_id="w", peer_id="alice", metadata=struct(**metadata))

    first = await c.peers.SetPeerMetadata(request(sent_ns=NANOS, ratio=0.1))
    assert first.consistency_token
    again = await c.peers.SetPeerMetadata(request(sent_ns=NANOS, ratio=0.1))
    assert again.consistency_token == ""  # it already reads so: nothing written
    assert len(logged(settings, DIRECTORY, PeerMetadataSet, 1)) == 1
    changed = await c.peers.SetPeerMetadata(request(sent_ns=NANOS + 10_000, ratio=0.1))
    assert changed.consistency_token  # a real change is still written
    assert len(logged(settings, DIRECTORY, PeerMetadataSet, 2)) == 2


async def test_create_observations_under_a_key_writes_once(settings, servers):
    _, c = await servers()
    await c.setup_conversation("w", "s", peers=("alice", "bob"))

    def request(*contents):
        return observations_pb2.CreateObservationsRequest(
            workspace_id="w",
            observer_id="alice",
            observed_id="bob",
            idempotency_key="k-obs",
            observations=[observations_pb2.NewObservation(content=t) for t in contents],
        )

    first = await c.observations.CreateObservations(request("bob likes tea", "bob lives in Oslo"))
    assert (await c.observations.CreateObservations(request("bob likes tea", "bob lives in Oslo"))) == first
    await rejected(
        c.observations.CreateObservations(request("bob likes coffee")),
        grpc.StatusCode.FAILED_PRECONDITION,
        "already used",
    )
    assert len(logged(settings, OBSERVATIONS, ObservationAdded, 2)) == 2


async def append_stray(server, key: str, content: str = "stray") -> str:
    """Append, straight to the log, a message under `key` with another append id (what the API's lock
    prevents, as an API that died mid-write could leave); returns its token."""
    stray = MessageAppended(
        workspace_id="w",
        session_id="s",
        message_id="stray",
        peer_id="alice",
        content=content,
        created_at=datetime.now(UTC),
        producer=server.ctx.producer,
        request=KeyedRequest(key=key, scope="w/s", fingerprint="other", request_id="stray"),
    )
    return (await server.ctx.log.append([stray])).encode()


async def test_the_projector_keeps_the_first_append_under_a_key_and_drops_a_later_one(servers):
    server, c = await servers()
    await c.setup_conversation("w", "s", peers=("alice",))
    first = await c.messages.AddMessages(add_request("k-twice", "first"))
    token = await append_stray(server, "k-twice")
    assert await stored(c, token) == list(first.message_ids)
    assert (await c.messages.AddMessages(add_request("k-twice", "first"))) == first


async def test_a_keyed_retry_while_its_first_append_is_half_projected_returns_the_first_reply(
    settings, servers, monkeypatch
):
    # an API appended two messages under a key and died (its lock gone); the projector applied the first
    # in one batch, the second falls in its next. The retry found half the reply and wrote again: the ids
    # it chose were taken (ALREADY_EXISTS) though the first write stood whole
    server, c = await servers()
    await c.setup_conversation("w", "s", peers=("alice",))
    request = add_request("k-half", "one", "two")
    for i, m in enumerate(request.messages):
        m.message_id = f"half-{i}"
    new = [convert.new_message(m, i) for i, m in enumerate(request.messages)]
    dead = idempotency.keyed("w", ("w", "s"), "k-half", new).request()  # what the dead API's events carried
    first, rest = (
        MessageAppended(
            workspace_id="w",
            session_id="s",
            message_id=m.message_id,
            peer_id=m.peer_id,
            content=m.content,
            created_at=datetime.now(UTC),
            producer=server.ctx.producer,
            request=dead,
        )
        for m in new
    )
    await server.ctx.freshness.wait(await server.ctx.log.append([first]))  # the first batch
    met_half, whole = asyncio.Event(), idempotency._whole

    async def watched(conn, k, row):
        if len(row["ids"]) < k.size:
            met_half.set()
        return await whole(conn, k, row)

    monkeypatch.setattr(idempotency, "_whole", watched)
    retry = asyncio.ensure_future(c.messages.AddMessages(request, timeout=60))
    await asyncio.wait_for(met_half.wait(), 30)  # the retry meets half the first append projected
    await server.ctx.log.append([rest])  # the next batch
    reply = await retry
    assert list(reply.message_ids) == ["half-0", "half-1"]
    assert await stored(c, reply.consistency_token) == ["half-0", "half-1"]
    assert (await c.messages.AddMessages(request)) == reply
    assert [e.message_id for e in logged(settings, SESSIONS, MessageAppended, 2)] == ["half-0", "half-1"]


def test_concurrent_calls_with_one_key_through_peerlog_serve_with_two_processes(settings, two_process_api):
    _, port, token, _ = two_process_api
    # a connection each, so the kernel spreads them over both processes (test_api_processes checks it does)
    channels = [channel(f"127.0.0.1:{port}", token, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(8)]
    try:
        first = channels[0]
        workspaces_pb2_grpc.WorkspaceServiceStub(first).GetOrCreateWorkspace(
            workspaces_pb2.GetOrCreateWorkspaceRequest(workspace_id="w"), timeout=30
        )
        peers_pb2_grpc.PeerServiceStub(first).GetOrCreatePeer(
            peers_pb2.GetOrCreatePeerRequest(workspace_id="w", peer_id="alice"), timeout=30
        )
        sessions_pb2_grpc.SessionServiceStub(first).GetOrCreateSession(
            sessions_pb2.GetOrCreateSessionRequest(
                workspace_id="w", session_id="s", members=[sessions_pb2.MemberSpec(peer_id="alice")]
            ),
            timeout=30,
        )
        request = add_request("k-serve", "one copy", "of two turns")
        with ThreadPoolExecutor(len(channels)) as pool:
            replies = list(
                pool.map(lambda ch: messages_pb2_grpc.MessageServiceStub(ch).AddMessages(request, timeout=60), channels)
            )
    finally:
        for ch in channels:
            ch.close()
    assert all(r == replies[0] for r in replies), replies
    assert [e.message_id for e in logged(settings, SESSIONS, MessageAppended, 2)] == list(replies[0].message_ids)


async def test_a_rebuild_keeps_the_same_first_append_and_a_repeat_still_gets_its_reply(settings, servers):
    server, c = await servers()
    await c.setup_conversation("w", "s", peers=("alice",))
    first = await c.messages.AddMessages(add_request("k-rebuild", "kept"))
    await server.ctx.freshness.wait(await append_stray(server, "k-rebuild"))
    report = await asyncio.get_running_loop().run_in_executor(None, lambda: rebuild(settings, progress=lambda _: None))
    assert report.switched and report.differences["idempotent_requests"] == 0, report.differences
    assert (await c.messages.AddMessages(add_request("k-rebuild", "kept"))) == first
    assert await stored(c) == list(first.message_ids)


async def test_the_router_and_embedder_skip_a_retry_appended_after_an_api_died_before_projecting(
    settings, servers, projector, start_worker
):
    # an API that dies between its append and its projection frees the key's lock, so a retry on another
    # API finds no projected row and appends again: the log then holds the same key twice. The projector
    # drops the second; the processors must too, or the retry is perceived, derived and embedded twice
    server, c = await servers()
    await c.setup_conversation("w", "s", peers=("alice",))
    projector.stop()
    first = await server.ctx.log.append(
        [
            MessageAppended(
                workspace_id="w",
                session_id="s",
                message_id="first",
                peer_id="alice",
                content="the first append",
                created_at=datetime.now(UTC),
                producer=server.ctx.producer,
                request=KeyedRequest(key="k-died", scope="w/s", fingerprint="same", request_id="dead-api"),
            )
        ]
    )
    await append_stray(server, "k-died", content="the first append")  # the retry: same key, its own append id
    projector.start()
    after = await c.messages.AddMessages(add_request("k-after", "a later turn"))
    start_worker("router,embedder")
    perceived = logged(settings, PERCEIVED, MessagePerceived, 2)
    assert [p.message_id for p in perceived] == ["first", after.message_ids[0]]
    embedded = read_events(
        settings,
        MESSAGE_EMBEDDINGS,
        lambda es: after.message_ids[0] in {m.message_id for e in es for m in e.messages},
        settle=1.0,
    )
    assert [m.message_id for e in embedded if isinstance(e, MessagesEmbedded) for m in e.messages] == [
        "first",
        after.message_ids[0],
    ]
    assert await stored(c, first.encode()) == ["first", *after.message_ids]
