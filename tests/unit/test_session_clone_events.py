"""CloneSession's pure part, without a broker: the events a clone is made of, and that copies are not perceived."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.api.clones import CloneRequest, clone_events, up_to
from services.errors import NotFound
from services.events import MemberJoined, MessageAppended, MessageOrigin, ProducerInfo, SessionCreated
from services.router.policy import SessionState, decide, evolve
from services.settings import Settings

P = ProducerInfo(component="test", version="0")
T = datetime(2026, 1, 1, tzinfo=UTC)


def row(message_id: str, session_id: str = "s", peer_id: str = "bob", author_name: str | None = None) -> dict:
    return {
        "workspace_id": "w",
        "session_id": session_id,
        "message_id": message_id,
        "peer_id": peer_id,
        "author_name": author_name,
        "content": f"text of {message_id}",
        "created_at": T,
        "metadata": {"k": message_id},
    }


def clone(rows, origins=None, members=("alice", "bob")):
    ids = iter(f"copy-{i}" for i in range(100))
    return clone_events(
        CloneRequest("w", "s", "c"), {"topic": "tea"}, members, rows, origins or {}, P, lambda: next(ids), T
    )


def test_a_clone_is_the_session_then_its_members_then_the_copies_in_order_each_naming_its_origin():
    events = clone([row("m1"), row("m2", peer_id="alice")])
    assert [type(e) for e in events] == [SessionCreated, MemberJoined, MemberJoined, MessageAppended, MessageAppended]
    assert events[0].session_id == "c" and events[0].metadata == {"topic": "tea"}
    copies = events[3:]
    assert [(c.message_id, c.peer_id, c.content, c.created_at, c.metadata) for c in copies] == [
        ("copy-0", "bob", "text of m1", T, {"k": "m1"}),
        ("copy-1", "alice", "text of m2", T, {"k": "m2"}),
    ]
    assert [c.origin for c in copies] == [
        MessageOrigin(workspace_id="w", session_id="s", message_id="m1"),
        MessageOrigin(workspace_id="w", session_id="s", message_id="m2"),
    ]


def test_a_copy_names_its_author_as_the_original_did():
    copies = [e for e in clone([row("m1", author_name="Bob Ray"), row("m2")]) if isinstance(e, MessageAppended)]
    assert [c.author_name for c in copies] == ["Bob Ray", ""]


def test_a_copy_of_a_copy_names_where_the_message_was_first_sent():
    first = {"origin_workspace_id": "w", "origin_session_id": "first", "origin_message_id": "m0"}
    (copy,) = [e for e in clone([row("m1")], {"m1": first}) if isinstance(e, MessageAppended)]
    assert copy.origin == MessageOrigin(workspace_id="w", session_id="first", message_id="m0")


def test_up_to_keeps_the_messages_through_the_named_one_and_refuses_an_unknown_one():
    rows = [row("m1"), row("m2"), row("m3")]
    assert [r["message_id"] for r in up_to(rows, "m2")] == ["m1", "m2"]
    assert up_to(rows, "") == rows
    with pytest.raises(NotFound, match="'m9' is not a message of the session"):
        up_to(rows, "m9")


def test_the_router_perceives_no_copy_so_nothing_is_derived_twice():
    state, out = SessionState(), []
    for e in clone([row("m1")], members=("bob",)):
        out += decide(state, e, P, Settings().configuration())
        state = evolve(state, e)
    assert out == [] and state.last_seq == 1
