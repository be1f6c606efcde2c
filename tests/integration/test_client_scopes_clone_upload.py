"""peerlog_client's scope, clone, upload and as_of methods, sync and asyncio, against the real stack (Kafka,
Postgres, the projector, the API server; Chat talks to the HTTP test model server)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from peerlog_client import AlreadyExists, AsyncPeerlog, InvalidArgument, NewObservation, NotFound, Peerlog, Scope
from peerlog_client.models import AddedMessages, ClonedSession
from tests.integration.test_client_library import (
    ApiInThread,
    api,  # noqa: F401 - the fixture: the API, its Chat on the test model
)
from tests.support.auth import admin_token
from tests.support.model_server import Reply


@pytest.fixture
def peerlog(api: ApiInThread, settings) -> Iterator[Peerlog]:  # noqa: F811 - the imported fixture
    with Peerlog(api.address, token=admin_token(settings), timeout=20) as client:
        yield client


def two_sessions(peerlog: Peerlog):
    """alice about bob: "Bob lives in Oslo" learnt in s1, "Bob keeps bees" in s2."""
    ws = peerlog.workspace("acme")
    alice, bob = ws.peer("alice"), ws.peer("bob")
    s1, s2 = (ws.session(s, members=[alice, bob]) for s in ("s1", "s2"))
    s1.add_messages([(bob, "I live in Oslo")])
    s2.add_messages([(bob, "I keep bees")])
    alice.create_observations(
        [NewObservation("Bob lives in Oslo", session_id="s1"), NewObservation("Bob keeps bees", session_id="s2")],
        target=bob,
    )
    return ws, alice, bob, s1, s2


def test_scopes_are_created_changed_listed_and_bound_every_read_of_the_client(peerlog, model_server):
    ws, alice, bob, s1, s2 = two_sessions(peerlog)
    north = ws.create_scope("north", name="up north", sessions=[s1])
    assert isinstance(north, Scope) and (north.scope_id, north.name, north.session_ids) == (
        "north",
        "up north",
        ("s1",),
    )
    assert [o.content for o in alice.representation(target=bob, scope=north).observations] == ["Bob lives in Oslo"]
    assert [
        r.observation.content for r in alice.search_observations("Where does Bob live?", target=bob, scope="north")
    ] == ["Bob lives in Oslo"]
    assert {r.message.session_id for r in ws.search("Oslo bees", scope=north)} == {"s1"}
    assert {r.message.session_id for r in bob.search("Oslo bees", scope=north)} == {"s1"}
    ctx = s2.context(observer=alice, target=bob, search_query="Oslo", scope=north)
    assert [o.content for o in ctx.observations] == ["Bob lives in Oslo"]
    model_server.script([Reply(content="Oslo.")])
    alice.chat("Where does Bob live?", target=bob, level="minimal", scope=north)
    prompt = str(model_server.chat_requests()[-1]["messages"])
    assert "Bob lives in Oslo" in prompt and "Bob keeps bees" not in prompt

    time.sleep(0.05)
    then = datetime.now(UTC)
    time.sleep(0.05)
    assert ws.add_scope_sessions(north, s2).session_ids == ("s1", "s2")
    assert ws.remove_scope_sessions("north", "s1").session_ids == ("s2",)
    assert ws.scope("north", as_of=then).session_ids == ("s1",)
    assert [s.scope_id for s in ws.scopes()] == ["north"]
    with pytest.raises(AlreadyExists):
        ws.create_scope("north")
    with pytest.raises(NotFound, match="scope 'south'"):
        alice.representation(target=bob, scope="south")


def test_clone_copies_a_session_up_to_a_message_and_the_copies_name_their_origin(peerlog):
    ws = peerlog.workspace("acme")
    alice, bot = ws.peer("alice"), ws.peer("bot")
    chat = ws.session("s1", members=[alice, bot])
    added = chat.add_messages([(alice, "one"), (bot, "two"), (alice, "three")])
    cloned = chat.clone("s1-copy", up_to=added.message_ids[1])
    assert isinstance(cloned, ClonedSession) and cloned.session.session_id == "s1-copy"
    assert cloned.session.members == ("alice", "bot") and len(cloned.message_ids) == 2
    copy = ws.session("s1-copy", create=False)
    assert [m.content for m in copy.messages()] == ["one", "two"]
    origin = ws.message(cloned.message_ids[0]).origin
    assert (origin.session_id, origin.message_id) == ("s1", added.message_ids[0])
    with pytest.raises(AlreadyExists):
        chat.clone("s1-copy")


def test_upload_file_sends_a_file_in_pieces_and_appends_its_chunks_in_order(peerlog, monkeypatch):
    import peerlog_client._sync as sync_client

    monkeypatch.setattr(sync_client, "PIECE_BYTES", 7)  # many requests in one stream, splitting words
    ws = peerlog.workspace("acme")
    alice = ws.peer("alice")
    notes = ws.session("notes", members=[alice])
    text = "Bees need water.\n\nOslo winters are long.\n"
    added = notes.upload_file("bees.md", text.encode(), author=alice)
    assert isinstance(added, AddedMessages) and added.message_ids
    got = list(notes.messages())
    assert "".join(m.content for m in got).replace("\n", "") == text.replace("\n", "")
    assert got[0].metadata["file_name"] == "bees.md" and got[0].peer_id == "alice"
    with pytest.raises(InvalidArgument):
        notes.upload_file("empty.txt", b"", author=alice)
    assert len(list(notes.messages())) == len(got)  # the refused file wrote nothing


def test_as_of_reaches_chat_context_search_and_list_of_observations(peerlog, model_server):
    ws, alice, bob, s1, s2 = two_sessions(peerlog)
    time.sleep(0.05)
    then = datetime.now(UTC)
    time.sleep(0.05)
    alice.create_observations([NewObservation("Bob moved to Bergen", session_id="s1")], target=bob)
    assert {o.content for o in alice.observations(target=bob, as_of=then)} == {"Bob lives in Oslo", "Bob keeps bees"}
    assert "Bob moved to Bergen" in {o.content for o in alice.observations(target=bob)}
    found = alice.search_observations("Where does Bob live?", target=bob, as_of=then)
    assert {r.observation.content for r in found} == {"Bob lives in Oslo", "Bob keeps bees"}
    ctx = s1.context(observer=alice, target=bob, as_of=then)
    assert "Bob moved to Bergen" not in {o.content for o in ctx.observations}
    model_server.script([Reply(content="Oslo.")])
    alice.chat("Where does Bob live?", target=bob, level="minimal", as_of=then)
    prompt = str(model_server.chat_requests()[-1]["messages"])
    assert "Bob lives in Oslo" in prompt and "Bergen" not in prompt


def test_the_async_client_has_the_same_scope_clone_and_upload_methods(api, settings):  # noqa: F811
    async def scenario() -> None:
        async with AsyncPeerlog(api.address, token=admin_token(settings), timeout=20) as peerlog:
            ws = await peerlog.workspace("acme")
            alice = await ws.peer("alice")
            s1 = await ws.session("s1", members=[alice])
            await s1.upload_file("a.txt", b"Alice likes tea.", author=alice)
            cloned = await s1.clone("s2")
            scope = await ws.create_scope("tea", sessions=["s2"])
            assert scope.session_ids == ("s2",) and len(cloned.message_ids) == 1
            hits = await ws.search("tea", scope=scope)
            assert [(h.message.session_id, h.message.content) for h in hits] == [("s2", "Alice likes tea.")]
            assert (await ws.remove_scope_sessions(scope, "s2")).session_ids == ()
            assert await ws.search("tea", scope=scope) == ()  # an empty scope finds nothing

    asyncio.run(scenario())
