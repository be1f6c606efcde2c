"""Issue 10 §3: the configuration hierarchy's pure parts. Each level overrides the one below
(message > session > workspace > global); the router, the summarizer and the deriver honour the result."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from services.deriver.batching import Batching, add, next_window
from services.deriver.prompt import build_messages
from services.events import (
    ConfigLevel,
    Configuration,
    MemberJoined,
    MessageAppended,
    ProducerInfo,
    SessionConfigured,
    decode,
    encode,
    resolve,
)
from services.router.policy import SessionState, decide, evolve
from services.settings import Settings

P = ProducerInfo(component="test", version="0")
T = datetime(2026, 1, 1, tzinfo=UTC)
G = Settings().configuration()


@pytest.mark.parametrize(
    "levels, value, level",
    [
        ((None, None, None), True, ConfigLevel.GLOBAL),
        ((Configuration(reasoning=False), None, None), False, ConfigLevel.WORKSPACE),
        ((Configuration(reasoning=False), Configuration(reasoning=True), None), True, ConfigLevel.SESSION),
        (
            (Configuration(reasoning=False), Configuration(reasoning=True), Configuration(reasoning=False)),
            False,
            ConfigLevel.MESSAGE,
        ),
        ((Configuration(reasoning=False), Configuration(summaries=False), None), False, ConfigLevel.WORKSPACE),
    ],
)
def test_each_level_overrides_the_one_below_and_an_unset_field_inherits(levels, value, level):
    resolved = resolve(G, *levels).settings["reasoning"]
    assert (resolved.value, resolved.level) == (value, level)


def test_every_setting_resolves_independently():
    out = resolve(
        G,
        Configuration(summary_short_every=7, dialectic_instructions="be brief"),
        Configuration(summary_short_every=3),
        Configuration(deriver_instructions="names only"),
    )
    assert {n: (r.value, r.level) for n, r in out.settings.items() if r.level != ConfigLevel.GLOBAL} == {
        "summary_short_every": (3, ConfigLevel.SESSION),
        "dialectic_instructions": ("be brief", ConfigLevel.WORKSPACE),
        "deriver_instructions": ("names only", ConfigLevel.MESSAGE),
    }
    assert out["summary_long_every"] == G.summary_long_every


def test_the_global_level_must_set_everything():
    with pytest.raises(ValueError, match="reasoning"):
        resolve(Configuration())


def test_the_configurations_survive_the_log_and_an_old_message_has_none():
    message = said(
        "a",
        "hi",
        configuration=Configuration(reasoning=False),
        workspace_configuration=Configuration(summary_short_every=2),
    )
    assert decode(encode(message)) == message
    old = message.model_dump(mode="json", exclude={"configuration", "workspace_configuration"}) | {"schema_version": 2}
    assert decode(orjson.dumps(old)).configuration is None


def joined(peer, observe_others=None, observe_me=None):
    return MemberJoined(
        workspace_id="w",
        session_id="s",
        peer_id=peer,
        observe_me=observe_me,
        observe_others=observe_others,
        joined_at=T,
        producer=P,
    )


def said(peer, text, **levels):
    return MessageAppended(
        workspace_id="w",
        session_id="s",
        message_id=f"m-{text}",
        peer_id=peer,
        content=text,
        created_at=T,
        producer=P,
        **levels,
    )


def configured(**settings):
    return SessionConfigured(workspace_id="w", session_id="s", configuration=Configuration(**settings), producer=P)


def perceived(*events):
    state, out = SessionState(), []
    for e in events:
        out += [(p.observer_id, p.observed_id, p.instructions) for p in decide(state, e, P, G)]
        state = evolve(state, e, G)
    return out


def test_reasoning_off_at_a_level_routes_nothing_and_a_higher_level_turns_it_back_on():
    ws_off = Configuration(reasoning=False)
    assert perceived(joined("a"), said("a", "x", workspace_configuration=ws_off)) == []
    assert perceived(joined("a"), configured(reasoning=True), said("a", "x", workspace_configuration=ws_off)) == [
        ("a", "a", "")
    ]
    assert (
        perceived(joined("a"), configured(reasoning=True), said("a", "x", configuration=Configuration(reasoning=False)))
        == []
    )


def test_observe_defaults_apply_where_the_member_does_not_say():
    assert perceived(joined("a"), joined("b"), said("a", "x")) == [("a", "a", "")]
    events = (joined("a"), joined("b"), configured(observe_others=True, observe_me=False), said("a", "x"))
    assert perceived(*events) == [("b", "a", "")]


def test_a_member_that_says_it_observes_no_one_is_not_overruled_by_the_sessions_default():
    # false was "not said": a session's observe_others=true made every member observe the others, and no
    # member could be left out of it
    events = (joined("a"), joined("b", observe_others=False), joined("c"), configured(observe_others=True))
    assert perceived(*events, said("a", "x")) == [("a", "a", ""), ("c", "a", "")]


def test_a_join_logged_by_version_1_and_a_router_state_kept_by_it_read_false_as_not_said():
    from services.events import decode, encode
    from services.router.policy import Member, SessionState, load_state

    raw = encode(joined("b", observe_others=False)).replace(b'"schema_version":2', b'"schema_version":1')
    assert decode(raw).observe_others is None
    kept = {"members": {"b": {"observe_me": None, "observe_others": False, "joined_after": 0}}, "last_seq": 3}
    assert load_state(kept).members["b"].observe_others is None
    said_no = SessionState(members={"b": Member(observe_others=False)})  # kept by this version: false is no
    assert load_state(said_no.model_dump(mode="json")).members["b"].observe_others is False


def test_observe_others_false_set_at_a_level_overrides_true_below_it():
    ws_on = Configuration(observe_others=True)
    assert perceived(joined("a"), joined("b"), said("a", "x", workspace_configuration=ws_on)) == [
        ("a", "a", ""),
        ("b", "a", ""),
    ]
    assert perceived(
        joined("a"), joined("b"), configured(observe_others=False), said("a", "x", workspace_configuration=ws_on)
    ) == [("a", "a", "")]
    assert perceived(
        joined("a"),
        joined("b"),
        configured(observe_others=True),
        said("a", "x", configuration=Configuration(observe_others=False)),
    ) == [("a", "a", "")]
    resolved = resolve(G, ws_on, Configuration(observe_others=False)).settings["observe_others"]
    assert (resolved.value, resolved.level) == (False, ConfigLevel.SESSION)


def test_observe_me_false_set_at_a_level_overrides_true_below_it():
    assert (
        perceived(
            joined("a"),
            configured(observe_me=False),
            said("a", "x", workspace_configuration=Configuration(observe_me=True)),
        )
        == []
    )
    assert (
        perceived(
            joined("a"), configured(observe_me=True), said("a", "x", configuration=Configuration(observe_me=False))
        )
        == []
    )


def test_a_peers_own_opt_out_is_not_overridden_by_a_level_only_by_its_membership():
    opted_out = dict(author_observe_me=False)
    ws_on = Configuration(observe_me=True)
    assert perceived(joined("a"), said("a", "x", workspace_configuration=ws_on, **opted_out)) == []
    assert perceived(joined("a"), configured(observe_me=True), said("a", "x", **opted_out)) == []
    assert perceived(joined("a", observe_me=True), said("a", "x", **opted_out)) == [("a", "a", "")]


def test_the_router_hands_the_deriver_the_instructions_in_force():
    out = perceived(
        joined("a"),
        configured(deriver_instructions="only food"),
        said("a", "x"),
        said("a", "y", configuration=Configuration(deriver_instructions="only pets")),
    )
    assert [i for *_, i in out] == ["only food", "only pets"]


def test_a_deriver_window_holds_one_set_of_instructions_and_its_prompt_carries_them():
    state = Batching()
    for text, instructions in (("x", "only food"), ("y", "only food"), ("z", "")):
        state = add(state, _perception(text, instructions), tokens=1)
    window, rest = next_window(state, 1000)
    assert [p.message_id for p in window] == ["m-x", "m-y"] and len(rest.pending) == 1
    system = build_messages("a", "a", window)[0]["content"]
    assert system.endswith("only food") and "only food" not in build_messages("a", "a", rest.pending)[0]["content"]


def _perception(text, instructions):
    state = evolve(evolve(SessionState(), joined("a"), G), configured(deriver_instructions=instructions), G)
    return decide(state, said("a", text), P, G)[0]


def test_the_dream_scheduler_follows_the_dream_settings_of_the_latest_perceived_message():
    from tests.unit.test_dream_schedule import explicit, message, run, tick

    def configured(**settings):
        return message(0).model_copy(update=settings)

    assert run([configured(dreams=True, dream_threshold=2), explicit(1), explicit(2), tick(13)])[1]
    assert not run([configured(dreams=True, dream_threshold=4), explicit(1), explicit(2), explicit(3), tick(13)])[1]
    assert not run([configured(dreams=False), explicit(1), explicit(2), explicit(3), tick(13)])[1]
    assert run([message(0), explicit(1), explicit(2), explicit(3), tick(13)])[1]  # none stamped: its own settings


def test_the_router_stamps_the_dream_settings_in_force():
    state = evolve(evolve(SessionState(), joined("a"), G), configured(dream_threshold=7), G)
    (p,) = decide(state, said("a", "x", configuration=Configuration(dreams=False)), P, G)
    assert (p.dreams, p.dream_threshold) == (False, 7)


def test_a_dream_requested_where_the_card_is_off_offers_no_card_tool_and_no_card_duty():
    from services.dreamer.prompt import system_prompt
    from services.dreamer.specialist import tool_specs
    from tests.unit.test_dream_schedule import explicit, message, run, tick

    names = lambda on: [s["function"]["name"] for s in tool_specs("deduction", on)]  # noqa: E731
    off = run([message(0).model_copy(update={"peer_card": False}), explicit(1), explicit(2), explicit(3), tick(13)])
    assert [d.peer_card for d in off[1]] == [False]
    assert [d.peer_card for d in run([message(0), explicit(1), explicit(2), explicit(3), tick(13)])[1]] == [True]
    assert "set_peer_card" in names(True) and "set_peer_card" not in names(False)
    assert "set_peer_card" not in system_prompt("deduction", "a", "b", peer_card=False)
