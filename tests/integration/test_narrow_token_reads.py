"""A token narrower than the workspace reads only what it covers: a peer's message search shows no turn the
peer did not see, ListSessions shows a peer's token only its own side of a session it has no scope of, and
GetProcessingStatus under a peer or session token speaks of no other session or pair, and its searches score
what it sees alike whatever the sessions it never joined hold. A workspace token still reads everything."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
import pytest
from google.protobuf import struct_pb2

from peerlog.v1 import (
    common_pb2,
    context_pb2,
    context_pb2_grpc,
    peers_pb2,
    peers_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
    workspaces_pb2,
    workspaces_pb2_grpc,
)
from services.api.channels import aio_channel
from services.api.tokens import mint
from services.bus.producer import EventLog
from services.cli.client import Client
from services.events import (
    DerivationDeadLettered,
    DreamReason,
    DreamRequested,
    MessagePerceived,
    ProducerInfo,
    SummaryDeadLettered,
    SummaryKind,
)
from tests.support.rpc import rejected
from tests.support.wait import every_write

TEST = ProducerInfo(component="test", version="0")
DENIED = grpc.StatusCode.PERMISSION_DENIED


async def _alice_came_and_went(c: Client):
    """s1 (metadata {"case": "merger"}): bob alone, then alice joins, says one thing and is removed, then
    bob goes on."""
    await c.workspace("w")
    for p in ("alice", "bob"):
        await c.peer("w", p)
    await c.session("w", "s1", members=["bob"], metadata=struct_pb2.Struct(fields={"case": _text("merger")}))
    await c.add("w", "s1", [("bob", "before alice came: the old code is 1234")])
    await c.sessions.AddMembers(
        sessions_pb2.AddMembersRequest(
            workspace_id="w", session_id="s1", members=[sessions_pb2.MemberSpec(peer_id="alice")]
        )
    )
    await c.add("w", "s1", [("alice", "I really like green tea")])
    await c.sessions.RemoveMembers(
        sessions_pb2.RemoveMembersRequest(workspace_id="w", session_id="s1", peer_ids=["alice"])
    )
    return (await c.add("w", "s1", [("bob", "now alice is gone: the vault code is 7781")])).consistency_token


def _text(value: str) -> struct_pb2.Value:
    return struct_pb2.Value(string_value=value)


def _search_alices(stub, token: str, include_adjacent: bool = True, **kw):
    return stub.SearchMessages(
        peers_pb2.SearchPeerMessagesRequest(
            workspace_id="w",
            peer_id="alice",
            query="green tea",
            include_adjacent=include_adjacent,
            consistency=common_pb2.ReadConsistency(consistency_token=token),
            **kw,
        )
    )


async def test_a_peer_token_gets_adjacent_turns_only_from_its_own_perspective(channel, settings):
    token = await _alice_came_and_went(Client(channel))
    async with aio_channel(channel.address, mint(settings.auth, ["peer:w/alice"])) as chan:
        alice = peers_pb2_grpc.PeerServiceStub(chan)
        # its own messages need only its scope; the turns around them are others', seen by no one in particular
        plain = await _search_alices(alice, token, include_adjacent=False)
        assert [r.message.content for r in plain.results] == ["I really like green tea"]
        await rejected(_search_alices(alice, token), DENIED, "workspace:w", "perspective_peer_id set to its peer")
        await rejected(_search_alices(alice, token, perspective_peer_id="bob"), DENIED, "peer:w/bob")
        (own,) = (await _search_alices(alice, token, perspective_peer_id="alice")).results
    assert own.message.content == "I really like green tea"
    assert not own.HasField("previous") and not own.HasField("next")  # said before she came, after she left

    async with aio_channel(channel.address, mint(settings.auth, ["workspace:w"])) as chan:
        (whole,) = (await _search_alices(peers_pb2_grpc.PeerServiceStub(chan), token)).results
    assert whole.previous.content == "before alice came: the old code is 1234"
    assert whole.next.content == "now alice is gone: the vault code is 7781"


async def _alices_sessions(address: str, settings, scopes: list[str], token: str):
    async with aio_channel(address, mint(settings.auth, scopes)) as chan:
        request = sessions_pb2.ListSessionsRequest(
            workspace_id="w", peer_id="alice", consistency=common_pb2.ReadConsistency(consistency_token=token)
        )
        return (await Client(chan).sessions.ListSessions(request)).sessions


async def test_a_peer_token_lists_its_sessions_without_their_metadata_members_or_turns_after_it_left(channel, settings):
    c = Client(channel)
    await _alice_came_and_went(c)
    await c.peer("w", "carol")
    await c.sessions.AddMembers(
        sessions_pb2.AddMembersRequest(
            workspace_id="w", session_id="s1", members=[sessions_pb2.MemberSpec(peer_id="carol", observe_others=True)]
        )
    )
    token = (await c.add("w", "s1", [("carol", "hello bob")])).consistency_token

    (whole,) = await _alices_sessions(channel.address, settings, ["workspace:w"], token)
    assert [m.peer_id for m in whole.memberships] == ["bob", "alice", "carol"]
    assert (whole.metadata["case"], whole.message_count) == ("merger", 4)

    (own,) = await _alices_sessions(channel.address, settings, ["peer:w/alice"], token)
    assert (own.session_id, own.created_at) == ("s1", whole.created_at)
    assert not own.metadata.fields  # the session's metadata is for session:w/s1 (GetSession) only
    (period,) = own.memberships  # not bob's, nor carol's, who came after alice left
    assert period.peer_id == "alice" and period.HasField("left_at") and own.membership_periods == 1
    assert own.message_count == 1  # her own turn: bob's were said before she came and after she left

    (named,) = await _alices_sessions(channel.address, settings, ["peer:w/alice", "session:w/s1"], token)
    assert named == whole


def _perceived(observer: str, observed: str, session: str, message_id: str) -> MessagePerceived:
    return MessagePerceived(
        workspace_id="acme",
        observer_id=observer,
        observed_id=observed,
        session_id=session,
        message_id=message_id,
        seq=1,
        content="-",
        created_at=datetime.now(UTC),
        producer=TEST,
    )


def _summary_failed(session: str, error: str) -> SummaryDeadLettered:
    return SummaryDeadLettered(
        workspace_id="acme",
        session_id=session,
        kind=SummaryKind.SHORT,
        last_seq=1,
        error=error,
        attempts=3,
        producer=TEST,
    )


@pytest.fixture
async def failures(channel, settings):
    """acme: s1 (alice, bob) and hr (bob, carol, never alice). bob's batch over a turn of each session was
    dead-lettered, bob has a dream, and both sessions' summaries failed. Returns a consistency token."""
    c = Client(channel)
    await c.setup_conversation("acme", "s1")
    await c.peer("acme", "carol")
    await c.session("acme", "hr", members=["bob", "carol"])
    (in_s1,) = (await c.add("acme", "s1", [("bob", "hi alice")])).message_ids
    (in_hr,) = (await c.add("acme", "hr", [("bob", "carol, about my dismissal")])).message_ids
    log = EventLog(settings.kafka)
    log.start()
    try:
        token = await log.append(
            [
                _perceived("alice", "bob", "s1", in_s1),
                _perceived("bob", "bob", "s1", in_s1),
                _perceived("bob", "bob", "hr", in_hr),
                _perceived("carol", "bob", "hr", in_hr),
                DerivationDeadLettered(
                    workspace_id="acme",
                    observer_id="bob",
                    observed_id="bob",
                    batch_id="batch-bob",
                    message_ids=(in_s1, in_hr),
                    error="model refused",
                    attempts=3,
                    producer=TEST,
                ),
                DreamRequested(
                    workspace_id="acme",
                    observer_id="bob",
                    observed_id="bob",
                    dream_id="d1",
                    reason=DreamReason.FORCED,
                    new_explicit=0,
                    producer=TEST,
                ),
                _summary_failed("s1", "model timed out"),
                _summary_failed("hr", "model refused: content about bob's dismissal"),
            ]
        )
    finally:
        log.close()
    return token.encode(), in_s1, in_hr


async def _status(settings, address: str, scopes: list[str], token: str, **scope):
    async with aio_channel(address, mint(settings.auth, scopes)) as chan:
        return await Client(chan).processing_status("acme", token, **scope)


def _summaries(status) -> set[str]:
    return {d.session_id for d in status.dead_lettered_summaries}


def _batches(status) -> list[tuple[str, list[str]]]:
    return [(b.batch_id, list(b.message_ids)) for b in status.dead_lettered_batches]


async def test_a_peer_token_sees_summary_failures_only_of_sessions_it_perceived_in(channel, settings, failures):
    token, _, _ = failures
    alice = await _status(settings, channel.address, ["peer:acme/alice"], token, observer_id="alice")
    assert _summaries(alice) == {"s1"}  # never hr, nor its error text
    assert _batches(alice) == [] and alice.dreams.requested == 0
    bob = await _status(settings, channel.address, ["peer:acme/bob"], token, observer_id="bob")
    assert _summaries(bob) == {"s1", "hr"}


async def test_a_status_of_an_observer_and_a_session_needs_a_token_covering_both(channel, settings, failures):
    token, _, _ = failures
    both = {"observer_id": "alice", "session_id": "s1"}
    for scopes, missing in ((["peer:acme/alice"], "session:acme/s1"), (["session:acme/s1"], "peer:acme/alice")):
        await rejected(_status(settings, channel.address, scopes, token, **both), DENIED, missing)
    await rejected(
        _status(settings, channel.address, ["peer:acme/alice"], token, observer_id="alice", session_id="hr"),
        DENIED,
        "session:acme/hr",
    )
    covered = await _status(settings, channel.address, ["peer:acme/alice", "session:acme/s1"], token, **both)
    assert _summaries(covered) == {"s1"}


async def test_a_session_token_sees_no_dreams_and_only_its_sessions_messages_of_a_batch(channel, settings, failures):
    token, in_s1, _ = failures
    s1 = await _status(settings, channel.address, ["session:acme/s1"], token, session_id="s1")
    assert _batches(s1) == [("batch-bob", [in_s1])]
    assert (s1.dreams.requested, s1.dreams.started, s1.dreams.completed, s1.dreams.failed) == (0, 0, 0, 0)
    assert _summaries(s1) == {"s1"}


async def test_a_workspace_token_still_sees_every_session_pair_and_message(channel, settings, failures):
    token, in_s1, in_hr = failures
    whole = await _status(settings, channel.address, ["workspace:acme"], token)
    assert _summaries(whole) == {"s1", "hr"}
    assert _batches(whole) == [("batch-bob", [in_s1, in_hr])]
    assert whole.dreams.requested == 1
    bob = await _status(settings, channel.address, ["workspace:acme"], token, observer_id="bob")
    assert _batches(bob) == [("batch-bob", [in_s1, in_hr])] and bob.dreams.requested == 1


GUESS = "7781 5512"


async def _alice_remembers(c: Client, w: str, secret: str) -> str:
    """alice writes her two numbers in "ours" (with bob); bob alone writes `secret` in "bob-private", which
    alice never joined."""
    await c.workspace(w)
    for p in ("alice", "bob"):
        await c.peer(w, p)
    await c.session(w, "ours", members=["alice", "bob"])
    await c.session(w, "bob-private", members=["bob"])
    ours = await c.add(w, "ours", [("alice", "remember 7781"), ("bob", "okay"), ("alice", "remember 5512")])
    hidden = await c.add(w, "bob-private", [("bob", f"the vault code is {secret}")])
    return every_write(ours.consistency_token, hidden.consistency_token)


def _found(reply) -> dict[str, float]:
    return {r.message.content: round(r.score, 6) for r in reply.results}


async def _narrow_searches(address: str, settings, w: str, token: str) -> dict[str, dict[str, float]]:
    """Content → score of each search a narrow token makes for GUESS: alice's token of her own messages and
    of what she saw (a perspective, and GetContext's relevant messages), and the token of "ours"."""
    asked = {"workspace_id": w, "consistency": common_pb2.ReadConsistency(consistency_token=token)}
    async with aio_channel(address, mint(settings.auth, [f"peer:{w}/alice"])) as chan:
        own = await peers_pb2_grpc.PeerServiceStub(chan).SearchMessages(
            peers_pb2.SearchPeerMessagesRequest(peer_id="alice", query=GUESS, **asked)
        )
        seen = await workspaces_pb2_grpc.WorkspaceServiceStub(chan).SearchMessages(
            workspaces_pb2.SearchWorkspaceMessagesRequest(perspective_peer_id="alice", query=GUESS, **asked)
        )
        context = await context_pb2_grpc.ContextServiceStub(chan).GetContext(
            context_pb2.GetContextRequest(
                session_id="ours",
                include_summary=False,
                observer_id="alice",
                search_query=GUESS,
                token_budget=2000,
                **asked,
            )
        )
    async with aio_channel(address, mint(settings.auth, [f"session:{w}/ours"])) as chan:
        session = await sessions_pb2_grpc.SessionServiceStub(chan).SearchMessages(
            sessions_pb2.SearchSessionMessagesRequest(session_id="ours", query=GUESS, **asked)
        )
    return {
        "own messages": _found(own),
        "perspective": _found(seen),
        "GetContext": {m.content: round(m.score, 6) for m in context.relevant_messages},
        "session token": _found(session),
    }


async def test_a_narrow_tokens_search_scores_do_not_depend_on_sessions_it_never_joined(channel, settings):
    c = Client(channel)
    held = await _narrow_searches(channel.address, settings, "wyes", await _alice_remembers(c, "wyes", "7781"))
    not_held = await _narrow_searches(channel.address, settings, "wno", await _alice_remembers(c, "wno", "3344"))
    for entry_point, scores in held.items():
        # each number is one of alice's words, held by one of her messages: they score alike
        assert scores["remember 7781"] == scores["remember 5512"], entry_point
    assert held == not_held  # bob's private session does not show through
