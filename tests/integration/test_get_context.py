"""GetContext packs representation, card, summary and recent messages within the token budget."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
import pytest
from google.protobuf import timestamp_pb2

from peerlog.v1 import context_pb2, context_pb2_grpc, messages_pb2, peers_pb2, sessions_pb2
from peerlog_client import AsyncPeerlog
from services.api.packing import Relevant, render_relevant
from services.cli.client import Client
from services.events import SummaryKind
from services.llm.tokens import count_tokens
from tests.support.observations import append
from tests.support.wait import every_write
from tests.unit.test_summarizer_policy import summary


def ask(channel, **kw) -> context_pb2.GetContextResponse:
    return context_pb2_grpc.ContextServiceStub(channel).GetContext(context_pb2.GetContextRequest(**kw))


@pytest.fixture
async def convo(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    token = ""
    for i in range(30):
        token = (await c.add("w", "s", [("alice" if i % 2 else "bob", f"turn {i}: " + "talk " * 10)])).consistency_token
    made = await c.create_observations("w", "alice", "bob", ["Bob lives in Oslo", "Bob keeps bees", "Bob is a nurse"])
    card = await c.peers.SetPeerCard(
        peers_pb2.SetPeerCardRequest(
            workspace_id="w", observer_id="alice", observed_id="bob", entries=["IDENTITY: Bob, a nurse"]
        )
    )
    await c.list_messages("w", "s", token)
    await c.all_observations("w", "alice", "bob", made.consistency_token)
    return c, card.consistency_token


async def test_a_generous_budget_gets_everything_in_order_and_counts_it_exactly(channel, convo):
    _, token = convo
    out = await ask(
        channel,
        workspace_id="w",
        session_id="s",
        token_budget=5000,
        observer_id="alice",
        target_id="bob",
        search_query="what did bob talk about",
        consistency={"consistency_token": token},
    )
    assert {o.content for o in out.observations} == {"Bob lives in Oslo", "Bob keeps bees", "Bob is a nurse"}
    assert list(out.peer_card) == ["IDENTITY: Bob, a nurse"]
    # the turns the query found are in relevant_messages, the rest in messages: each turn once
    recent = [m.content.split(":")[0] for m in out.messages]
    found = [m.content.split(":")[0] for m in out.relevant_messages]
    assert found and recent == sorted(recent, key=lambda t: int(t.split()[1]))
    assert sorted(recent + found) == sorted(f"turn {i}" for i in range(30))
    parts = (
        count_tokens(out.representation)
        + count_tokens("\n".join(out.peer_card))
        + sum(count_tokens(f"{m.peer_id}: {m.content}") for m in out.messages)
        + count_tokens(render_relevant([_relevant(m) for m in out.relevant_messages]))
    )
    assert out.tokens.total == parts <= 5000
    assert out.tokens.relevant_messages == parts - out.tokens.representation - out.tokens.card - out.tokens.messages


def _relevant(m) -> Relevant:
    return Relevant(m.message_id, m.peer_id, m.session_id, m.content, m.created_at.ToDatetime(tzinfo=UTC), m.score)


async def test_relevant_messages_come_from_every_session_the_observer_saw_and_no_other(channel, convo):
    c, _ = convo
    await c.peer("w", "carol")
    await c.session("w", "trip", members=["alice", "carol"])
    await c.session("w", "private", members=["bob", "carol"])
    trip = (await c.add("w", "trip", [("carol", "The lighthouse keeper retired in May")])).consistency_token
    token = every_write(
        trip, (await c.add("w", "private", [("carol", "The lighthouse was painted red")])).consistency_token
    )
    out = await ask(
        channel,
        workspace_id="w",
        session_id="s",
        token_budget=3000,
        observer_id="alice",
        search_query="lighthouse",
        consistency={"consistency_token": token},
    )
    assert [(m.session_id, m.content) for m in out.relevant_messages] == [
        ("trip", "The lighthouse keeper retired in May")
    ]
    assert out.relevant_messages[0].created_at.seconds > 0


async def lighthouse_sent_at(c: Client, at: timestamp_pb2.Timestamp) -> dict:
    """Bob's lighthouse turn backdated to `at`; the GetContext request (chat_messages rendered too) that finds it."""
    new = messages_pb2.NewMessage(peer_id="bob", content="The lighthouse was painted red", created_at=at)
    sent = await c.messages.AddMessages(
        messages_pb2.AddMessagesRequest(workspace_id="w", session_id="s", messages=[new])
    )
    return dict(
        workspace_id="w",
        session_id="s",
        token_budget=3000,
        observer_id="alice",
        assistant_peer_id="alice",  # the server renders chat_messages too
        search_query="lighthouse painted",
        consistency={"consistency_token": sent.consistency_token},
    )


async def test_relevant_messages_are_headed_by_the_day_and_time_of_the_askers_time_zone(channel, convo):
    c, _ = convo
    late = timestamp_pb2.Timestamp()
    late.FromDatetime(datetime(2026, 1, 1, 23, 30, tzinfo=UTC))  # 08:30 on 2 January in Tokyo
    asked = await lighthouse_sent_at(c, late)
    tokyo, utc = await ask(channel, **asked, time_zone="Asia/Tokyo"), await ask(channel, **asked)
    line = "bob: The lighthouse was painted red"
    assert f"[s · 2026-01-02]\n08:30 {line}" in "\n".join(m.content for m in tokyo.chat_messages)
    assert f"[s · 2026-01-01]\n23:30 {line}" in "\n".join(m.content for m in utc.chat_messages)
    assert tokyo.relevant_messages[0].created_at == utc.relevant_messages[0].created_at == late
    async with AsyncPeerlog(channel.address, token=channel.token, timeout=20) as peerlog:
        session = await (await peerlog.workspace("w")).session("s")
        context = await session.context(
            tokens=3000, observer="alice", search_query="lighthouse painted", time_zone="Asia/Tokyo"
        )
    assert f"[s · 2026-01-02]\n08:30 {line}" in context.system_text()  # the client library heads them alike


async def test_a_message_backdated_to_year_one_is_headed_in_utc_when_the_askers_zone_cannot_hold_it(channel, convo):
    c, _ = convo
    first = timestamp_pb2.Timestamp(seconds=-62135596800 + 1800)  # 00:30 on 1 January of year 1, UTC
    asked = await lighthouse_sent_at(c, first)
    for zone in ("America/New_York", "Asia/Tokyo"):
        out = await ask(channel, **asked, time_zone=zone)
        assert out.relevant_messages[0].created_at == first
    west = await ask(channel, **asked, time_zone="America/New_York")  # 19:30 on 31 December of year 0: none
    assert "[s · 0001-01-01]\n00:30 bob: The lighthouse was painted red" in "\n".join(
        m.content for m in west.chat_messages
    )


async def test_a_perspective_peer_bounds_the_packed_messages_while_the_observers_store_answers(channel, convo):
    # bob is in every session, as an assistant is in every user's; packed on alice's behalf, nothing bob was
    # told where alice was not may come back
    c, _ = convo
    await c.peer("w", "carol")
    await c.session("w", "private", members=["bob", "carol"])
    await c.create_observations("w", "bob", "alice", ["Alice likes lighthouses"])
    private = (await c.add("w", "private", [("carol", "The lighthouse code is 4471")])).consistency_token
    shared = (await c.add("w", "s", [("alice", "I love that old lighthouse")])).consistency_token
    token = every_write(private, shared)

    async def packed(**kw) -> context_pb2.GetContextResponse:
        return await ask(
            channel,
            workspace_id="w",
            session_id="s",
            token_budget=3000,
            observer_id="bob",
            target_id="alice",
            search_query="lighthouse",
            consistency={"consistency_token": token},
            **kw,
        )

    as_bob, for_alice = await packed(), await packed(perspective_peer_id="alice")
    assert "The lighthouse code is 4471" in [m.content for m in as_bob.relevant_messages]
    shown = [m.content for m in [*for_alice.relevant_messages, *for_alice.messages]]
    assert "I love that old lighthouse" in shown and not any("4471" in t for t in shown)
    assert [o.content for o in for_alice.observations] == ["Alice likes lighthouses"]  # bob's store still answers
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await packed(perspective_peer_id="ghost")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "ghost" in err.value.details()


async def test_recent_messages_are_only_those_the_observer_saw_while_a_member(channel):
    """carol joins after the first two turns, dave leaves after the third: each gets only its turns."""
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob", "dave"))
    await c.peer("w", "carol")
    await c.add("w", "s", [("alice", "turn 0: hello"), ("bob", "turn 1: hi")])
    await c.session("w", "s", members=["carol"])
    await c.add("w", "s", [("alice", "turn 2: carol is here")])
    await c.sessions.RemoveMembers(
        sessions_pb2.RemoveMembersRequest(workspace_id="w", session_id="s", peer_ids=["dave"])
    )
    token = (await c.add("w", "s", [("bob", "turn 3: dave left"), ("carol", "turn 4: bye")])).consistency_token

    async def recent(observer: str, **kw) -> list[str]:
        out = await ask(
            channel,
            workspace_id="w",
            session_id="s",
            token_budget=2000,
            observer_id=observer,
            consistency={"consistency_token": token},
            **kw,
        )
        return [m.content.split(":")[0] for m in [*out.messages, *out.relevant_messages]]

    assert await recent("carol") == ["turn 2", "turn 3", "turn 4"]
    assert await recent("dave") == ["turn 0", "turn 1", "turn 2"]
    assert await recent("alice") == [f"turn {i}" for i in range(5)]
    assert sorted(await recent("carol", search_query="hello hi dave left")) == ["turn 2", "turn 3", "turn 4"]
    # without an observer there is no perspective: the session as it is
    out = await ask(
        channel, workspace_id="w", session_id="s", token_budget=2000, consistency={"consistency_token": token}
    )
    assert len(out.messages) == 5


@pytest.mark.parametrize("budget", [1, 5, 20, 60, 150, 400])
async def test_small_budgets_are_never_exceeded_and_keep_the_newest_messages(channel, convo, budget):
    out = await ask(
        channel, workspace_id="w", session_id="s", token_budget=budget, observer_id="alice", target_id="bob"
    )
    assert out.tokens.total <= budget
    if out.messages:
        assert out.messages[-1].content.startswith("turn 29")


async def test_a_session_of_many_short_turns_fills_the_budget_with_its_newest_turns(channel):
    """The newest turns are read as many as the room could hold at a typical line's length; turns far
    shorter than that all fit, so the read goes on: the answer is what reading the whole session gives."""
    c = Client(channel)
    await c.setup_conversation("w", "chatty")
    turns = [("alice" if i % 2 else "bob", f"ok {i}") for i in range(300)]
    for start in range(0, len(turns), 100):  # AddMessages takes 100 at a time
        token = (await c.add("w", "chatty", turns[start : start + 100])).consistency_token
    out = await ask(
        channel, workspace_id="w", session_id="chatty", token_budget=400, consistency={"consistency_token": token}
    )
    fitting, used = 0, 0
    for peer, text in reversed(turns):  # the newest turns that fit, counted one by one
        if used + count_tokens(f"{peer}: {text}") > 400:
            break
        fitting, used = fitting + 1, used + count_tokens(f"{peer}: {text}")
    assert fitting > 400 // 8 + 1  # more than the first read held
    assert [m.content for m in out.messages] == [text for _, text in turns[-fitting:]]
    assert out.tokens.messages == used == out.tokens.total


async def test_a_budget_larger_than_2000_short_turns_is_filled_with_all_of_them(channel):
    c = Client(channel)
    await c.setup_conversation("w", "chatty")
    turns = [("alice" if i % 2 else "bob", f"ok {i}") for i in range(3000)]
    for start in range(0, len(turns), 100):
        token = (await c.add("w", "chatty", turns[start : start + 100])).consistency_token
    out = await ask(
        channel, workspace_id="w", session_id="chatty", token_budget=30_000, consistency={"consistency_token": token}
    )
    assert [m.content for m in out.messages] == [text for _, text in turns]
    assert out.tokens.messages == sum(count_tokens(f"{peer}: {text}") for peer, text in turns) < 30_000


async def test_turns_the_tokenizer_packs_densely_never_make_a_reply_a_default_client_cannot_read(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    body = "| name | value |" + " " * 24_900 + "|"  # a padded table row, as pasted from a terminal: ~200 tokens
    for k in range(2):
        sent = await c.add("w", "s", [("bob", f"{k}-{i} {body}") for i in range(100)])
    for assistant in ("", "alice"):  # with chat_messages, every turn is in the reply twice
        out = await ask(
            channel,
            workspace_id="w",
            session_id="s",
            token_budget=100_000,
            assistant_peer_id=assistant,
            consistency={"consistency_token": sent.consistency_token},
        )
        assert 20 <= len(out.messages) < 200 and out.ByteSize() < 4 * 1024 * 1024
        assert out.messages[-1].content.startswith("1-99 ")  # the newest, and a contiguous window to it
        assert out.tokens.messages == sum(count_tokens(f"bob: {m.content}") for m in out.messages)


async def test_chat_rendering_puts_the_assistant_peer_turns_as_assistant(channel, convo):
    out = await ask(
        channel,
        workspace_id="w",
        session_id="s",
        token_budget=2000,
        observer_id="alice",
        target_id="bob",
        assistant_peer_id="alice",
    )
    roles = [(m.role, m.name) for m in out.chat_messages if m.role != "system"]
    assert roles[-1] == ("assistant", "alice") and ("user", "bob") in roles
    assert out.chat_messages[0].role == "system" and "Bob" in out.chat_messages[0].content


async def test_a_budget_over_the_limit_is_invalid_argument(channel, convo):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ask(channel, workspace_id="w", session_id="s", token_budget=100_001)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "token_budget" in err.value.details()


async def test_the_representation_is_in_time_order_with_markdown_by_level(channel, convo):
    c, token = convo
    out = await context_pb2_grpc.ContextServiceStub(channel).GetRepresentation(
        context_pb2.GetRepresentationRequest(
            workspace_id="w",
            observer_id="alice",
            target_id="bob",
            search_query="bees",
            consistency={"consistency_token": token},
        )
    )
    assert [o.content for o in out.observations] == ["Bob lives in Oslo", "Bob keeps bees", "Bob is a nurse"]
    assert out.markdown.startswith("## Explicit\n- Bob lives in Oslo")
    assert not out.truncated


async def test_a_representation_too_big_for_a_reply_leaves_out_its_lowest_ranked_observations(
    channel, convo, monkeypatch
):
    from services.api import validation

    c, _ = convo
    long = [f"Bob fact {i}: " + "\u4e2d" * 1_980 for i in range(12)]  # ~6 kB each, twice in a reply
    made = await c.create_observations("w", "alice", "bob", long)
    monkeypatch.setattr(validation, "MAX_PAGE_BYTES", 60_000)  # 3.5 MB in service: 500 of these pass it
    request = context_pb2.GetRepresentationRequest(
        workspace_id="w",
        observer_id="alice",
        target_id="bob",
        consistency={"consistency_token": made.consistency_token},
    )
    out = await context_pb2_grpc.ContextServiceStub(channel).GetRepresentation(request)
    assert out.truncated and 3 <= len(out.observations) < 15 and out.ByteSize() < 60_000 + 10_000
    times = [o.created_at.ToDatetime() for o in out.observations]
    assert times == sorted(times)  # still in time order


async def test_a_representation_of_an_unknown_peer_is_not_found(channel, convo):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await context_pb2_grpc.ContextServiceStub(channel).GetRepresentation(
            context_pb2.GetRepresentationRequest(workspace_id="w", observer_id="alice", target_id="ghost")
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "ghost" in err.value.details()


@pytest.mark.parametrize("query", ["what did bob talk about yesterday", "talk last week", "talk on Dec 25"])
async def test_a_time_named_as_of_the_latest_date_a_timestamp_holds_is_searched_not_failed(channel, convo, query):
    _, token = convo
    latest = timestamp_pb2.Timestamp()
    latest.FromDatetime(datetime(9999, 12, 31, tzinfo=UTC))
    out = await ask(
        channel,
        workspace_id="w",
        session_id="s",
        token_budget=2000,
        observer_id="alice",
        search_query=query,
        as_of=latest,
        consistency={"consistency_token": token},
    )
    assert out.relevant_messages and out.tokens.total <= 2000


PIXEL = "I adopted a greyhound named Pixel last spring"


async def test_a_turn_and_its_clone_copy_are_packed_once(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    turns = [("alice", "hello there"), ("bob", PIXEL), ("alice", "nice, how is she?"), ("bob", "she runs a lot")]
    sent = await c.add("w", "s", turns)
    copied = await c.sessions.CloneSession(
        sessions_pb2.CloneSessionRequest(
            workspace_id="w",
            session_id="s",
            new_session_id="c1",
            consistency={"consistency_token": sent.consistency_token},
        )
    )
    # read in either session; recalled from every session, or only from the other one (its copies can then
    # never be hits beside the turn read, and were packed in both sections)
    for session, allowed in (("c1", []), ("s", []), ("c1", ["s"]), ("s", ["c1"])):
        out = await ask(
            channel,
            workspace_id="w",
            session_id=session,
            session_ids=allowed,
            token_budget=3000,
            observer_id="alice",
            target_id="bob",
            search_query="greyhound Pixel",
            consistency={"consistency_token": copied.consistency_token},
        )
        shown = [m.content for m in out.relevant_messages] + [m.content for m in out.messages]
        assert shown.count(PIXEL) == 1 and len(shown) == len(set(shown)) == 4, (session, allowed, shown)


async def test_no_peer_card_under_a_scope_or_an_allowlist_and_no_withdrawn_premise_anywhere(channel, settings):
    from peerlog.v1 import scopes_pb2, scopes_pb2_grpc
    from services.events import Level
    from tests.support.observations import append, derived

    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.session("w", "other", members=["alice", "bob"])
    made = await c.create_observations("w", "alice", "bob", ["Bob lives in Oslo (WRONG)", "Bob earns 90k"])
    oslo = made.observation_ids[0]
    await c.all_observations("w", "alice", "bob", made.consistency_token)
    await c.all_observations(
        "w", "alice", "bob", append(settings, [derived("norway", Level.DEDUCTIVE, "Bob lives in Norway", [oslo])])
    )
    await c.peers.SetPeerCard(
        peers_pb2.SetPeerCardRequest(
            workspace_id="w", observer_id="alice", observed_id="bob", entries=["ATTRIBUTE: earns 90k"]
        )
    )
    await c.delete_observation("w", oslo, "the user said this is false")
    scope = await scopes_pb2_grpc.ScopeServiceStub(channel).CreateScope(
        scopes_pb2.CreateScopeRequest(workspace_id="w", scope_id="empty")
    )
    token = {"consistency_token": scope.consistency_token}
    everything = await ask(
        channel, workspace_id="w", session_id="s", observer_id="alice", target_id="bob", consistency=token
    )
    assert list(everything.peer_card) == ["ATTRIBUTE: earns 90k"]
    assert "Bob lives in Norway" in everything.representation and "WRONG" not in everything.representation
    representation = await context_pb2_grpc.ContextServiceStub(channel).GetRepresentation(
        context_pb2.GetRepresentationRequest(workspace_id="w", observer_id="alice", target_id="bob")
    )
    assert "WRONG" not in representation.markdown
    for narrowed in ({"scope_id": "empty"}, {"session_ids": ["other"]}):
        out = await ask(channel, workspace_id="w", session_id="other", observer_id="alice", target_id="bob", **narrowed)
        assert list(out.peer_card) == [] and list(out.observations) == [], narrowed


async def test_a_summary_is_packed_only_for_a_reader_who_saw_every_turn_it_covers(channel, settings):
    """carol joins after the PIN was told, dave leaves before the summary's last turn: the summary would
    tell each of them what their own messages section leaves out. The short summary covers turns 1-3,
    an older long one turns 1-2, which dave did see."""
    SHORT = "Bob's PIN is 4321; Alice noted it, and greeted Carol when she joined the session."
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob", "dave"))
    await c.peer("w", "carol")
    await c.add("w", "s", [("bob", "my PIN is 4321"), ("alice", "noted")])
    await c.session("w", "s", members=["carol"])
    await c.sessions.RemoveMembers(
        sessions_pb2.RemoveMembersRequest(workspace_id="w", session_id="s", peer_ids=["dave"])
    )
    await c.add("w", "s", [("alice", "hello carol")])

    # appended as the summarizer writes them (the model is not what this is about)
    token = append(
        settings, [summary(SummaryKind.LONG, "Bob told Alice his PIN.", 2), summary(SummaryKind.SHORT, SHORT, 3)]
    )

    async def summary_for(**kw) -> str:
        out = await ask(
            channel,
            workspace_id="w",
            session_id="s",
            token_budget=2000,
            consistency={"consistency_token": token},
            **kw,
        )
        return out.summary

    assert await summary_for(observer_id="alice") == SHORT  # both, and the short one is the longer here
    assert await summary_for() == SHORT  # no reader: the session as it is
    assert await summary_for(observer_id="carol") == ""
    assert await summary_for(observer_id="alice", perspective_peer_id="carol") == ""
    assert await summary_for(observer_id="dave") == "Bob told Alice his PIN."


async def test_the_api_answers_other_calls_while_a_get_context_counts_its_tokens(channel, convo, monkeypatch):
    # GetContext counted tokens on the event loop: a context of long turns (6.6 s of counting) held every
    # RPC of every tenant on that API process until it was done
    import asyncio
    import threading

    from services.api import context_reads

    c, token = convo
    counting, answered, waits = threading.Event(), threading.Event(), []

    def count(text: str) -> int:
        if "talk" in text and not counting.is_set():  # the first turn counted waits for another call's answer
            counting.set()
            waits.append(answered.wait(timeout=10))
        return count_tokens(text)

    monkeypatch.setattr(context_reads, "count_tokens", count)
    call = asyncio.ensure_future(
        ask(channel, workspace_id="w", session_id="s", search_query="talk", consistency={"consistency_token": token})
    )
    assert await asyncio.to_thread(counting.wait, 10)
    assert len(await c.all_messages("w", "s", token)) == 30  # answered while the context is being packed
    answered.set()
    out = await call
    assert waits == [True] and out.relevant_messages
