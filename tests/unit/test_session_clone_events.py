"""CloneSession's pure part, without a broker: the events a clone is made of, and that copies are not perceived."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.api.clones import CloneRequest, Source, clone_events, up_to
from services.errors import NotFound
from services.events import (
    Configuration,
    MemberJoined,
    MessageAppended,
    MessageOrigin,
    ProducerInfo,
    SessionConfigured,
    SessionCreated,
)
from services.router.policy import SessionState, decide, evolve
from services.settings import Settings

P = ProducerInfo(component="test", version="0")
T = datetime(2026, 1, 1, tzinfo=UTC)


def row(message_id: str, seq: int = 1, peer_id: str = "bob", author_name: str | None = None) -> dict:
    return {
        "workspace_id": "w",
        "session_id": "s",
        "message_id": message_id,
        "seq": seq,
        "peer_id": peer_id,
        "author_name": author_name,
        "content": f"text of {message_id}",
        "created_at": T,
        "metadata": {"k": message_id},
    }


def period(peer_id: str, joined_after: int = 0, left_after: int | None = None, **settings) -> dict:
    return {
        "peer_id": peer_id,
        "observe_me": settings.get("observe_me"),
        "observe_others": settings.get("observe_others", False),
        "joined_at": T,
        "joined_after_seq": joined_after,
        "left_at": T if left_after is not None else None,
        "left_after_seq": left_after,
    }


def clone(rows, origins=None, periods=None, levels=(), message_levels=None, up_to_id=""):
    ids = iter(f"copy-{i}" for i in range(100))
    source = Source(
        metadata={"topic": "tea"},
        messages=rows,
        periods=[period("alice"), period("bob")] if periods is None else periods,
        session_levels=levels,
        message_levels=message_levels or {},
        origins=origins or {},
        whole=not up_to_id,
    )
    return clone_events(CloneRequest("w", "s", "c", up_to_id), source, P, lambda: next(ids))


def kinds(events) -> list[str]:
    def name(e):
        if isinstance(e, MessageAppended):
            return e.content.removeprefix("text of ")
        who = getattr(e, "peer_id", "")
        return f"{type(e).__name__}{'(' + who + ')' if who else ''}"

    return [name(e) for e in events]


def test_a_clone_is_the_session_then_its_members_then_the_copies_in_order_each_naming_its_origin():
    events = clone([row("m1", 1), row("m2", 2, peer_id="alice")])
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


def test_a_late_joiner_joins_the_clone_where_it_joined_the_source_and_sees_no_earlier_copy():
    periods = [period("alice"), period("bob"), period("carol", joined_after=2), period("dave", 0, left_after=1)]
    events = clone([row("m1", 1), row("m2", 2), row("m3", 3, peer_id="carol")], periods=periods)
    assert kinds(events) == [
        "SessionCreated",
        "MemberJoined(alice)",
        "MemberJoined(bob)",
        "MemberJoined(dave)",
        "m1",
        "MemberLeft(dave)",
        "m2",
        "MemberJoined(carol)",
        "m3",
    ]


def test_members_keep_their_own_settings_and_the_session_level_comes_where_it_was_set():
    periods = [period("alice", observe_me=False), period("bob", observe_others=True)]
    levels = [
        {"configuration": {"reasoning": False}, "after_seq": 0, "recorded_at": T},
        {"configuration": {"reasoning": True}, "after_seq": 1, "recorded_at": T},
    ]
    events = clone([row("m1", 1), row("m2", 2)], periods=periods, levels=levels)
    assert kinds(events) == [
        "SessionCreated",
        "MemberJoined(alice)",
        "MemberJoined(bob)",
        "SessionConfigured",
        "m1",
        "SessionConfigured",
        "m2",
    ]
    joined = {e.peer_id: (e.observe_me, e.observe_others) for e in events if isinstance(e, MemberJoined)}
    assert joined == {"alice": (False, False), "bob": (None, True)}
    assert [e.configuration.reasoning for e in events if isinstance(e, SessionConfigured)] == [False, True]


def test_a_copy_carries_the_levels_its_original_was_read_under():
    own, stamp = Configuration(summaries=False), Configuration(reasoning=False)
    m1, m2 = [
        e
        for e in clone([row("m1", 1), row("m2", 2)], message_levels={"m1": (own, stamp)})
        if isinstance(e, MessageAppended)
    ]
    assert (m1.configuration, m1.workspace_configuration) == (own, stamp)
    assert (m2.configuration, m2.workspace_configuration) == (None, None)


def test_a_clone_up_to_a_message_leaves_out_what_came_after_it():
    periods = [period("alice"), period("bob", 0, left_after=2), period("carol", joined_after=1)]
    events = clone([row("m1", 1), row("m2", 2)], periods=periods, up_to_id="m2")
    assert kinds(events) == [
        "SessionCreated",
        "MemberJoined(alice)",
        "MemberJoined(bob)",
        "m1",
        "MemberJoined(carol)",
        "m2",
        "MemberLeft(bob)",  # removed from the source since: it leaves the clone after its last copy
    ]
    whole = clone([row("m1", 1), row("m2", 2)], periods=periods)
    assert kinds(whole)[-1] == "MemberLeft(bob)"


def test_a_copy_names_its_author_as_the_original_did():
    copies = [e for e in clone([row("m1", author_name="Bob Ray"), row("m2")]) if isinstance(e, MessageAppended)]
    assert [c.author_name for c in copies] == ["Bob Ray", ""]


def test_a_copy_of_a_copy_names_where_the_message_was_first_sent():
    first = {"origin_workspace_id": "w", "origin_session_id": "first", "origin_message_id": "m0"}
    (copy,) = [e for e in clone([row("m1")], {"m1": first}) if isinstance(e, MessageAppended)]
    assert copy.origin == MessageOrigin(workspace_id="w", session_id="first", message_id="m0")


def test_up_to_keeps_the_messages_through_the_named_one_and_refuses_an_unknown_one():
    rows = [row("m1", 1), row("m2", 2), row("m3", 3)]
    assert [r["message_id"] for r in up_to(rows, "m2")] == ["m1", "m2"]
    assert up_to(rows, "") == rows
    with pytest.raises(NotFound, match="'m9' is not a message of the session"):
        up_to(rows, "m9")


def test_the_router_perceives_no_copy_so_nothing_is_derived_twice():
    state, out = SessionState(), []
    for e in clone([row("m1")], periods=[period("bob")]):
        out += decide(state, e, P, Settings().configuration())
        state = evolve(state, e, Settings().configuration())
    assert out == [] and state.last_seq == 1


def test_a_leave_taken_by_a_process_whose_clock_ran_behind_the_join_still_follows_it_in_the_clone():
    from datetime import timedelta

    from services.events import MemberLeft

    # bob joined through an API process 2 s ahead, and was removed through another one second later
    # (its clock: a second before the join's), with no message between; then he joined again
    skewed = [
        {**period("bob", 1, 1), "joined_at": T + timedelta(seconds=2), "left_at": T + timedelta(seconds=1)},
        {**period("bob", 1), "joined_at": T + timedelta(seconds=1, milliseconds=500)},
    ]
    events = clone([row("m1", 1), row("m2", 2)], periods=[period("alice"), *skewed])
    assert kinds(events) == [
        "SessionCreated",
        "MemberJoined(alice)",
        "m1",
        "MemberJoined(bob)",
        "MemberLeft(bob)",
        "MemberJoined(bob)",
        "m2",
    ]
    assert [type(e) for e in events if getattr(e, "peer_id", "") == "bob" and not isinstance(e, MessageAppended)] == [
        MemberJoined,
        MemberLeft,
        MemberJoined,
    ]


def test_a_cut_past_the_clone_limit_is_refused_as_too_long_not_as_an_unknown_message(monkeypatch):
    # the first 10,001 messages were read, the cut message was not among them: NOT_FOUND for a message of
    # the session, where the documented answer is FAILED_PRECONDITION
    import asyncio

    import pytest

    from projections import message_reads
    from services.api import clones
    from services.errors import FailedPrecondition, NotFound

    rows = [{"message_id": f"m{i}", "session_id": "s", "seq": i} for i in range(1, clones.MAX_CLONED_MESSAGES + 2)]

    async def list_messages(conn, w, s, after, limit, reverse, **_):
        return rows[:limit]

    async def message(conn, w, message_id):
        return {"message_id": message_id, "session_id": "s"} if message_id == "m15000" else None

    monkeypatch.setattr(message_reads, "list_messages", list_messages)
    monkeypatch.setattr(message_reads, "message", message)
    request = clones.CloneRequest("w", "s", "copy", up_to_message_id="m15000")
    with pytest.raises(FailedPrecondition, match="over 10000 messages"):
        asyncio.run(clones._source(None, request, {}))
    with pytest.raises(NotFound, match="is not a message of the session"):
        asyncio.run(clones._source(None, clones.CloneRequest("w", "s", "copy", up_to_message_id="elsewhere"), {}))


def test_a_clone_past_its_byte_cap_is_refused_before_anything_is_read_or_appended(monkeypatch):
    # 10,000 copies of 25,000 four-byte characters passed the producer's 1 GiB queue: UNAVAILABLE every
    # time, and the writes grouped into the same transaction failed with it
    import asyncio

    import pytest

    from projections import message_reads
    from services.api import clones
    from services.errors import FailedPrecondition

    monkeypatch.setattr(clones, "MAX_CLONED_BYTES", 1_000)
    rows = [
        {"message_id": f"m{i}", "session_id": "s", "seq": i, "content": "é" * 100, "metadata": {}} for i in range(6)
    ]

    async def list_messages(conn, w, s, after, limit, reverse, **_):
        return rows[:limit]

    monkeypatch.setattr(message_reads, "list_messages", list_messages)
    with pytest.raises(FailedPrecondition, match="clone it up to a message"):
        asyncio.run(clones._source(None, clones.CloneRequest("w", "s", "copy"), {}))
