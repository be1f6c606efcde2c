"""A token narrower than the workspace cannot tell which session or scope ids exist: a session its peer
never joined answers exactly as a missing one, and a scope it cannot read recalls nothing whether or not it
exists. A workspace token is still told plainly what is missing."""

from __future__ import annotations

import grpc

from peerlog.v1 import (
    common_pb2,
    context_pb2,
    context_pb2_grpc,
    messages_pb2,
    messages_pb2_grpc,
    observations_pb2,
    observations_pb2_grpc,
    scopes_pb2,
    sessions_pb2,
    sessions_pb2_grpc,
)
from services.api.channels import aio_channel
from services.api.tokens import mint
from services.cli.client import Client
from tests.support.wait import every_write

NOT_FOUND = grpc.StatusCode.NOT_FOUND


async def _bobs_secret_session(c: Client) -> str:
    """alice and bob share "ours"; bob alone is in "bob-and-lawyer", the only session of scope "legal";
    alice was in "left" and was removed."""
    await c.workspace("w")
    for p in ("alice", "bob"):
        await c.peer("w", p)
    await c.session("w", "ours", members=["alice", "bob"])
    await c.session("w", "bob-and-lawyer", members=["bob"])
    await c.session("w", "left", members=["alice", "bob"])
    await c.sessions.RemoveMembers(
        sessions_pb2.RemoveMembersRequest(workspace_id="w", session_id="left", peer_ids=["alice"])
    )
    await c.scopes.CreateScope(
        scopes_pb2.CreateScopeRequest(workspace_id="w", scope_id="legal", session_ids=["bob-and-lawyer"])
    )
    ours = await c.add("w", "ours", [("alice", "see you at the tea house")])
    secret = await c.add("w", "bob-and-lawyer", [("bob", "the settlement is 40,000 tea leaves")])
    return every_write(ours.consistency_token, secret.consistency_token)


async def _outcome(call) -> tuple[grpc.StatusCode, str]:
    """The call's status and details, or OK and the reply."""
    try:
        return grpc.StatusCode.OK, str(await call)
    except grpc.aio.AioRpcError as error:
        return error.code(), error.details()


def _context(token: str, **kw) -> context_pb2.GetContextRequest:
    fields = {"session_id": "ours", "observer_id": "alice", "search_query": "tea", "include_summary": False} | kw
    return context_pb2.GetContextRequest(
        workspace_id="w", consistency=common_pb2.ReadConsistency(consistency_token=token), **fields
    )


async def test_a_peer_token_gets_the_same_answer_for_an_unseen_session_as_for_a_missing_one(channel, settings):
    token = await _bobs_secret_session(Client(channel))
    async with aio_channel(channel.address, mint(settings.auth, ["peer:w/alice"])) as chan:
        ctx = context_pb2_grpc.ContextServiceStub(chan)
        for field in ("session_ids", "session_id"):
            value = (lambda s: [s]) if field == "session_ids" else (lambda s: s)
            unseen = await _outcome(ctx.GetContext(_context(token, **{field: value("bob-and-lawyer")})))
            missing = await _outcome(ctx.GetContext(_context(token, **{field: value("no-such-one")})))
            assert unseen[0] == missing[0] == NOT_FOUND
            assert unseen[1].replace("bob-and-lawyer", "X") == missing[1].replace("no-such-one", "X")
            assert "or this token may not see it" in unseen[1]
        # a session it was in and left, and its own, are still its to name
        assert (await _outcome(ctx.GetContext(_context(token, session_ids=["left"]))))[0] == grpc.StatusCode.OK
        ours = await ctx.GetContext(_context(token, session_ids=["ours"]))
        assert [m.content for m in ours.relevant_messages] == ["see you at the tea house"]


async def test_a_peer_token_naming_a_scope_recalls_nothing_whether_or_not_it_exists(channel, settings):
    token = await _bobs_secret_session(Client(channel))
    async with aio_channel(channel.address, mint(settings.auth, ["peer:w/alice"])) as chan:
        ctx = context_pb2_grpc.ContextServiceStub(chan)
        real = await ctx.GetContext(_context(token, scope_id="legal"))
        made_up = await ctx.GetContext(_context(token, scope_id="no-such-scope"))
    assert real == made_up and not real.relevant_messages
    async with aio_channel(channel.address, mint(settings.auth, ["workspace:w"])) as chan:
        ctx = context_pb2_grpc.ContextServiceStub(chan)
        status, details = await _outcome(ctx.GetContext(_context(token, scope_id="no-such-scope")))
        assert status == NOT_FOUND and "scope 'no-such-scope' does not exist" in details
        status, details = await _outcome(ctx.GetContext(_context(token, session_ids=["no-such-one"])))
        assert status == NOT_FOUND and "may not see" not in details


async def test_a_peer_writing_into_a_session_it_never_joined_is_told_it_is_not_found(channel, settings):
    await _bobs_secret_session(Client(channel))

    def add(session_id: str):
        new = messages_pb2.NewMessage(peer_id="alice", content="hello?")
        return messages.AddMessages(
            messages_pb2.AddMessagesRequest(workspace_id="w", session_id=session_id, messages=[new])
        )

    async with aio_channel(channel.address, mint(settings.auth, ["peer:w/alice"])) as chan:
        messages = messages_pb2_grpc.MessageServiceStub(chan)
        unseen, missing = await _outcome(add("bob-and-lawyer")), await _outcome(add("no-such-one"))
        assert unseen[0] == missing[0] == NOT_FOUND
        assert unseen[1].replace("bob-and-lawyer", "X") == missing[1].replace("no-such-one", "X")
        # a session it left: it knows that one, and is told why it may not post there
        assert (await _outcome(add("left")))[0] == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_perspective_search_of_an_unseen_session_answers_as_for_a_missing_one(channel, settings):
    token = await _bobs_secret_session(Client(channel))

    def search(session_id: str):
        return sessions.SearchMessages(
            sessions_pb2.SearchSessionMessagesRequest(
                workspace_id="w",
                session_id=session_id,
                query="settlement",
                perspective_peer_id="alice",
                consistency=common_pb2.ReadConsistency(consistency_token=token),
            )
        )

    async with aio_channel(channel.address, mint(settings.auth, ["peer:w/alice"])) as chan:
        sessions = sessions_pb2_grpc.SessionServiceStub(chan)
        unseen, missing = await _outcome(search("bob-and-lawyer")), await _outcome(search("no-such-one"))
    assert unseen[0] == missing[0] == NOT_FOUND
    assert unseen[1].replace("bob-and-lawyer", "X") == missing[1].replace("no-such-one", "X")


async def test_a_peer_token_reads_its_own_store_about_a_peer_it_never_shared_a_session_with(channel, settings):
    # an app imports what its assistant knows about a user before they ever talk: the store is the token's own
    c = Client(channel)
    await _bobs_secret_session(c)
    await c.peer("w", "newcomer")
    made = await c.create_observations("w", "alice", "newcomer", ["the newcomer prefers green tea"])
    async with aio_channel(channel.address, mint(settings.auth, ["peer:w/alice"])) as chan:
        listed = await observations_pb2_grpc.ObservationServiceStub(chan).ListObservations(
            observations_pb2.ListObservationsRequest(
                workspace_id="w",
                observer_id="alice",
                observed_id="newcomer",
                consistency=common_pb2.ReadConsistency(consistency_token=made.consistency_token),
            )
        )
    assert [o.content for o in listed.observations] == ["the newcomer prefers green tea"]


async def test_an_idempotency_key_used_in_an_unseen_session_tells_a_peer_token_nothing(channel, settings):
    c = Client(channel)
    await _bobs_secret_session(c)
    bobs = messages_pb2.NewMessage(peer_id="bob", content="note to lawyer")
    await c.messages.AddMessages(
        messages_pb2.AddMessagesRequest(
            workspace_id="w", session_id="bob-and-lawyer", idempotency_key="daily-note-1", messages=[bobs]
        )
    )

    def add(session_id: str, key: str):
        new = messages_pb2.NewMessage(peer_id="alice", content="hello?")
        request = messages_pb2.AddMessagesRequest(
            workspace_id="w", session_id=session_id, idempotency_key=key, messages=[new]
        )
        return messages.AddMessages(request)

    async with aio_channel(channel.address, mint(settings.auth, ["peer:w/alice"])) as chan:
        messages = messages_pb2_grpc.MessageServiceStub(chan)
        used, unused = (
            await _outcome(add("bob-and-lawyer", "daily-note-1")),
            await _outcome(add("bob-and-lawyer", "k2")),
        )
        missing = await _outcome(add("no-such-one", "daily-note-1"))
    assert used == unused and used[0] == NOT_FOUND  # not FAILED_PRECONDITION naming bob's write and its time
    assert used[1].replace("bob-and-lawyer", "X") == missing[1].replace("no-such-one", "X")


async def test_a_session_filter_on_a_store_read_answers_alike_for_an_unseen_and_a_missing_session(channel, settings):
    token = await _bobs_secret_session(Client(channel))

    def listed(session_id: str):
        request = observations_pb2.ListObservationsRequest(
            workspace_id="w",
            observer_id="alice",
            observed_id="alice",
            session_id=session_id,
            consistency=common_pb2.ReadConsistency(consistency_token=token),
        )
        return stub.ListObservations(request)

    async with aio_channel(channel.address, mint(settings.auth, ["peer:w/alice"])) as chan:
        stub = observations_pb2_grpc.ObservationServiceStub(chan)
        unseen, missing = await _outcome(listed("bob-and-lawyer")), await _outcome(listed("no-such-one"))
        assert (await _outcome(listed("ours")))[0] == grpc.StatusCode.OK
    assert unseen[0] == missing[0] == NOT_FOUND
    assert unseen[1].replace("bob-and-lawyer", "X") == missing[1].replace("no-such-one", "X")
