"""The pure core of Chat: loop decisions, citations and the abstention rule, without any I/O."""

from __future__ import annotations

import pytest

from services.dialectic.loop import SEARCH_TOOLS
from services.dialectic.policy import (
    ABSTAIN_ANSWER,
    CallTools,
    Finish,
    ForceAnswer,
    Limits,
    LoopState,
    ModelTurn,
    cited_ids,
    decide,
    drop_invented_markers,
    final_answer,
    may_use_tools,
    should_short_circuit,
)
from services.dialectic.settings import LEVELS, DialecticSettings
from services.llm.client import ToolCall

CALL = ToolCall("c1", "search_messages", '{"query": "bees"}')
LIMITS = Limits(tool_rounds=2, token_budget=10_000, result_tokens=500)
SHOWN = {"o1": "observation", "o2": "observation", "m1": "message"}


def test_a_turn_without_tool_calls_finishes_with_its_text_and_declared_ids():
    assert decide(LoopState(), ModelTurn("Bob keeps bees [obs:o1]", (), ("m1",)), LIMITS, 100) == Finish(
        "Bob keeps bees [obs:o1]", ("m1",)
    )


def test_tool_calls_within_the_cap_and_budget_are_carried_out():
    assert decide(LoopState(rounds=1), ModelTurn("", (CALL,)), LIMITS, 100) == CallTools((CALL,), room=4_900)


def test_tool_calls_at_the_round_cap_force_an_answer():
    assert decide(LoopState(rounds=2), ModelTurn("", (CALL,)), LIMITS, 100) == ForceAnswer("round_cap")


def test_tool_calls_that_would_overrun_the_token_budget_force_an_answer():
    state = LoopState(spent_tokens=8_000)
    assert decide(state, ModelTurn("", (CALL,)), LIMITS, 600) == ForceAnswer("token_budget")
    assert not may_use_tools(state, LIMITS, 600)


def test_after_a_forced_answer_the_next_turn_is_the_answer_even_if_it_asks_for_tools():
    state = LoopState().force()
    assert not may_use_tools(state, LIMITS, 10)
    assert decide(state, ModelTurn("Oslo", (CALL,)), LIMITS, 10) == Finish("Oslo", ())


def test_a_cap_of_zero_never_offers_tools():
    assert not may_use_tools(LoopState(), Limits(0, 10_000, 100), 10)


def test_the_loop_always_ends_within_the_cap_plus_one_forced_turn():
    state, turns = LoopState(), 0
    while True:
        turns += 1
        decision = decide(state, ModelTurn("", (CALL,)), LIMITS, 100)
        if isinstance(decision, Finish):
            break
        state = state.next_round() if isinstance(decision, CallTools) else state.force()
    assert state.rounds == LIMITS.tool_rounds and turns == LIMITS.tool_rounds + 2


def test_only_ids_the_model_was_shown_are_cited_by_kind_once_each_in_order():
    text = "Bob keeps bees [obs:o2][msg:m1] and owns a boat [obs:invented] [obs:o2]"
    cites = cited_ids(text, ["o1", "nope", "m1"], SHOWN)
    assert cites.observation_ids == ("o2", "o1") and cites.message_ids == ("m1",)


def test_invented_or_mislabelled_markers_are_dropped_from_the_text():
    assert drop_invented_markers("a [obs:o1] b [obs:zz] c [obs:m1]", SHOWN) == "a [obs:o1] b  c "


def test_with_no_evidence_shown_a_free_text_answer_is_replaced_by_the_abstention():
    answer = final_answer("Bob lives in Paris [obs:o1]", ["o1"], {}, free_text=True)
    assert answer.text == ABSTAIN_ANSWER and answer.abstained
    assert answer.citations.observation_ids == () and answer.citations.message_ids == ()


def test_with_no_evidence_a_json_answer_keeps_its_shape_but_cites_nothing():
    answer = final_answer('{"city": null}', ["o1"], {}, free_text=False)
    assert answer.text == '{"city": null}' and answer.abstained and answer.citations.observation_ids == ()


def test_an_empty_free_text_answer_is_an_abstention():
    assert final_answer("  ", [], SHOWN, free_text=True).text == ABSTAIN_ANSWER


def test_with_evidence_the_answer_stands_with_its_real_citations():
    answer = final_answer("Oslo [obs:o1]", [], SHOWN, free_text=True)
    assert not answer.abstained and answer.citations.observation_ids == ("o1",)


def test_the_service_short_circuits_only_when_nothing_exists_and_no_schema_is_asked_for():
    assert should_short_circuit(evidence_found=False, wants_json=False)
    assert not should_short_circuit(evidence_found=True, wants_json=False)
    assert not should_short_circuit(evidence_found=False, wants_json=True)


def test_levels_have_the_reference_caps_and_minimal_searches_only():
    settings = DialecticSettings()
    assert [settings.level(n).tool_rounds for n in LEVELS] == [1, 5, 2, 4, 10]
    assert [settings.level(n).prefetch for n in LEVELS] == [10, 25, 25, 25, 25]
    assert [settings.level(n).search_only for n in LEVELS] == [True, False, False, False, False]
    assert settings.level("high").stage == "dialectic_high" and len(SEARCH_TOOLS) == 2
    with pytest.raises(ValueError, match="unknown reasoning level"):
        settings.level("extreme")


def test_the_time_asked_at_is_in_utc_where_the_askers_zone_would_pass_the_first_or_last_year():
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    from services.dialectic.prompt import asked_at

    now = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    first, last = datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 30, tzinfo=UTC)
    assert asked_at(now, ZoneInfo("America/New_York"), first) == (
        "Memory as it stood at: 0001-01-01 00:00 (UTC, 0001-01-01 00:00 UTC)."
    )
    assert asked_at(now, ZoneInfo("Asia/Tokyo"), last).endswith("(UTC, 9999-12-31 23:30 UTC).")
    assert asked_at(now, ZoneInfo("Asia/Tokyo")) == "Asked at: 2026-12-07 21:00 (Asia/Tokyo, 2026-12-07 12:00 UTC)."


def test_tools_are_withdrawn_sooner_when_their_specs_take_room_in_every_call():
    state, with_specs = LoopState(spent_tokens=7_000), Limits(2, 10_000, 500, offer_tokens=1_000)
    assert may_use_tools(state, LIMITS, 600)  # 7,000 + 2 × 1,100 fits in 10,000
    assert not may_use_tools(state, with_specs, 600)  # and 1,000 more does not
