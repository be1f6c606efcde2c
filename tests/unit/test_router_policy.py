"""Routing decisions, without a broker: who perceives a message."""

from __future__ import annotations

from datetime import UTC, datetime

from services.events import MemberJoined, MemberLeft, MessageAppended, ProducerInfo
from services.router.policy import SessionState, decide, evolve
from services.settings import Settings

P = ProducerInfo(component="test", version="0")
T = datetime(2026, 1, 1, tzinfo=UTC)
G = Settings().configuration()


def joined(peer, observe_me=None, observe_others=False):
    return MemberJoined(
        workspace_id="w",
        session_id="s",
        peer_id=peer,
        observe_me=observe_me,
        observe_others=observe_others,
        joined_at=T,
        producer=P,
    )


def said(peer, text, author_observe_me=True, name=""):
    return MessageAppended(
        workspace_id="w",
        session_id="s",
        message_id=f"m-{text}",
        peer_id=peer,
        content=text,
        created_at=T,
        author_observe_me=author_observe_me,
        author_name=name,
        producer=P,
    )


def run(*events, global_=G):
    state, out = SessionState(), []
    for e in events:
        out += decide(state, e, P, global_)
        state = evolve(state, e, global_)
    return [(p.observer_id, p.observed_id, p.content) for p in out]


def test_the_author_perceives_itself_and_only_observe_others_members_perceive_it():
    got = run(joined("a", observe_others=True), joined("b"), joined("c"), said("b", "hi"))
    assert got == [("b", "b", "hi"), ("a", "b", "hi")]


def test_a_member_who_left_perceives_nothing_more_and_a_rejoin_resumes():
    got = run(
        joined("a", observe_others=True),
        joined("b"),
        said("b", "one"),
        MemberLeft(workspace_id="w", session_id="s", peer_id="a", left_at=T, producer=P),
        said("b", "two"),
        joined("a", observe_others=True),
        said("b", "three"),
    )
    assert [g for g in got if g[0] == "a"] == [("a", "b", "one"), ("a", "b", "three")]


def test_session_observe_me_overrides_the_peer_level_setting_both_ways():
    assert run(joined("a", observe_me=False), said("a", "x", author_observe_me=True)) == []
    assert run(joined("a", observe_me=True), said("a", "x", author_observe_me=False)) == [("a", "a", "x")]
    assert run(joined("a"), said("a", "x", author_observe_me=False)) == []


def test_a_message_from_a_non_member_reaches_nobody():
    assert run(joined("a", observe_others=True), said("z", "sneaky")) == []


def test_the_context_turn_is_the_latest_by_someone_else_and_seq_counts_messages():
    state = SessionState()
    out = []
    for e in (joined("a"), joined("b"), said("a", "q1"), said("b", "r1"), said("b", "r2"), said("a", "q2")):
        out += decide(state, e, P, G)
        state = evolve(state, e, G)
    by = {p.content: p for p in out}
    assert by["q1"].previous_turn is None
    assert by["r2"].previous_turn.content == "q1"
    assert by["q2"].previous_turn.content == "r2"
    assert [by[t].seq for t in ("q1", "r1", "r2", "q2")] == [1, 2, 3, 4]


def test_a_perception_carries_the_authors_display_name_and_its_context_turns():
    state, out = SessionState(), []
    for e in (joined("u-1"), joined("u-2"), said("u-1", "q1", name="Maria Lopez"), said("u-2", "r1", name="Tom")):
        out += decide(state, e, P, G)
        state = evolve(state, e, G)
    reply = next(p for p in out if p.content == "r1")
    assert reply.observed_name == "Tom" and reply.previous_turn.author_name == "Maria Lopez"


def perceptions(*events):
    state, out = SessionState(), []
    for e in events:
        out += decide(state, e, P, G)
        state = evolve(state, e, G)
    return state, out


def test_a_context_turn_sent_before_the_observer_joined_is_not_given_to_it():
    _, out = perceptions(
        joined("carol"),
        joined("bob"),
        said("carol", "my test came back positive, tell no one"),
        joined("alice", observe_others=True),
        said("bob", "I will keep it to myself"),
    )
    context = {p.observer_id: p.previous_turn for p in out if p.content == "I will keep it to myself"}
    assert context["alice"] is None  # she was not there when carol spoke
    assert context["bob"].content == "my test came back positive, tell no one"


def test_the_session_state_keeps_two_turns_however_many_peers_speak():
    events = [joined(f"p{i}") for i in range(200)] + [said(f"p{i}", f"turn {i} " + "字" * 1500) for i in range(200)]
    state, _ = perceptions(*events)
    assert len(state.last_turns) == 2 and len(state.model_dump_json()) < 20_000
    _, out = perceptions(*events, said("p199", "again"))
    again = [p for p in out if p.content == "again"]
    assert [p.previous_turn.content.split()[1] for p in again] == ["198"]  # the latest turn by anyone else


def test_a_sessions_state_at_its_member_cap_with_the_longest_ids_and_turns_fits_a_kafka_record():
    from services.api.writes import MAX_MEMBERS

    state = SessionState()
    for i in range(MAX_MEMBERS):
        state = evolve(state, joined(f"{i:04d}" + "p" * 508, observe_others=True), G)  # 512 characters
    for peer in ("0000", "0001"):  # the two last turns it keeps, cut to 2,000 characters, 6 bytes each as JSON
        turn = said(peer + "p" * 508, "\x01" * 25_000).model_copy(update={"message_id": f"m-{peer}"})
        state = evolve(state, turn, G)
    assert len(state.members) == MAX_MEMBERS
    assert len(state.model_dump_json().encode()) < 400_000  # Kafka refuses a record past 1 MB


def test_the_global_observe_others_and_observe_me_are_applied_as_reported():
    # the environment's values were reported in force by GetEffectiveConfiguration and never routed
    others_on = G.model_copy(update={"observe_others": True})
    assert run(
        joined("bot", observe_others=None), joined("ann", observe_others=None), said("ann", "hi"), global_=others_on
    ) == [
        ("ann", "ann", "hi"),
        ("bot", "ann", "hi"),
    ]
    me_off = G.model_copy(update={"observe_me": False})
    assert run(joined("ann", observe_others=None), said("ann", "hi"), global_=me_off) == []
    # a member's own setting still wins over the global level
    assert run(joined("ann", observe_me=True), said("ann", "hi"), global_=me_off) == [("ann", "ann", "hi")]


def test_a_message_sent_with_reasoning_off_is_not_the_next_turns_context():
    # never perceived, it still went to the deriver's model as the reply's context, and onto the log with it
    from services.events import Configuration

    private = said("ann", "my card number is 4111 1111 1111 1111").model_copy(
        update={"configuration": Configuration(reasoning=False)}
    )
    _, out = perceptions(joined("ann"), joined("bot"), said("ann", "hi"), private, said("bot", "thanks"))
    assert "4111" not in str([p.model_dump() for p in out])
    reply = next(p for p in out if p.content == "thanks")
    assert reply.previous_turn is None  # nor ann's older turn, from before what the reply answers
    assert reply.seq == 3  # the private message still counts in the session's sequence


def test_a_message_level_opt_out_keeps_the_message_out_of_pairs_whatever_the_membership_says():
    from services.events import Configuration

    def sent_with(**level):
        return said("a", "x").model_copy(update={"configuration": Configuration(**level)})

    # a peer token may put observe_me=false on its own message: the member's "yes" must not put it back
    assert run(joined("a", observe_me=True), sent_with(observe_me=False)) == []
    # observe_others=false on the message: members who joined observing the others do not perceive it
    assert run(joined("a"), joined("b", observe_others=True), sent_with(observe_others=False)) == [("a", "a", "x")]
    # a message's "yes" opts no one in: the member's and the peer's own "no" still hold
    assert run(joined("a", observe_me=False), sent_with(observe_me=True)) == []
    opted_out = said("a", "x", author_observe_me=False).model_copy(
        update={"configuration": Configuration(observe_me=True)}
    )
    assert run(joined("a"), opted_out) == []
    assert run(joined("a"), joined("b", observe_others=False), sent_with(observe_others=True)) == [("a", "a", "x")]
