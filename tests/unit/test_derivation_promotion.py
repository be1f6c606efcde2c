"""The pure pieces of promotion: which messages a derivation still lacks, and labels that follow the pair."""

from __future__ import annotations

import pytest

from services.deriver.batching import Batching, add, next_window
from services.deriver.judge import batch_id, judge
from services.deriver.prompt import ExtractedFact
from services.events import ORIGINAL, DerivationPromoted, ObservationAdded
from services.events.pairs import Pair
from services.rederivation.promote import check_promotable
from services.rederivation.rederive import check_name, missing
from services.rederivation.retry import by_current_label
from tests.unit.test_deriver_core import P, batch, perceived


def promoted(label: str) -> DerivationPromoted:
    return DerivationPromoted(workspace_id="w", observer_id="a", observed_id="a", derivation=label, producer=P)


def ids(events) -> list[str]:
    return [e.message_id for e in events]


def test_a_derivation_lacks_what_it_has_no_finished_batch_for():
    history = [perceived(1, "x"), perceived(2, "y"), perceived(3, "z")]
    assert ids(missing(history, "v2", done={"m2"})) == ["m1", "m3"]


def test_messages_perceived_while_a_derivation_is_current_are_left_to_the_live_deriver():
    history = [perceived(1, "x"), promoted("v2"), perceived(2, "y"), promoted("v3"), perceived(3, "z")]
    assert ids(missing(history, "v2", done=set())) == ["m1", "m3"]
    assert ids(missing(history, "", done=set())) == ["m2", "m3"]  # back to the original: it lacks what came later


def test_each_derivation_has_its_own_batch_ids_and_the_original_keeps_the_old_ones():
    plain = batch_id("w", "a", "b", ["m1", "m2"])
    assert batch_id("w", "a", "b", ["m1", "m2"], "") == plain
    assert batch_id("w", "a", "b", ["m1", "m2"], "v2") not in (plain, batch_id("w", "a", "b", ["m1", "m2"], "v3"))


def test_batching_keeps_the_pairs_derivation_through_queueing_and_windows():
    state = add(Batching(derivation="v2"), perceived(1, "x"), 5)
    window, rest = next_window(state, 1024)
    assert (state.derivation, rest.derivation, len(window)) == ("v2", "v2", 1)
    assert Batching.model_validate({"pending": []}).derivation == ""  # state written before promotion existed


def test_what_the_deriver_writes_for_a_pair_carries_its_derivation():
    window = batch("I live in Oslo").pending
    out = judge(
        Pair("w", "a", "a", "v2"),
        [ExtractedFact(content="a lives in Oslo", message_id="m0", span="Oslo")],
        [(1.0, 0.0)],
        window,
        [],
        batch="b",
        threshold=0.95,
        embedding_model="e",
        producer=P,
        cause=None,
        new_id=lambda: "o1",
    )
    assert [(type(e), e.derivation) for e in out.events] == [(ObservationAdded, "v2")]


def test_original_can_be_promoted_back_to_but_not_used_as_a_new_name():
    check_promotable(ORIGINAL)
    check_promotable("v2")
    with pytest.raises(ValueError):
        check_name(ORIGINAL)
    with pytest.raises(ValueError):
        check_promotable("no spaces")


def test_a_batch_the_live_deriver_parked_is_derived_again_until_a_batch_finishes_it():
    history = [perceived(1, "x"), perceived(2, "y"), promoted("v2"), perceived(3, "z")]
    assert ids(missing(history, "", done={"m1"}, parked={"m1", "m2"})) == ["m2", "m3"]
    assert ids(missing(history, "v2", done=set(), parked={"m3"})) == ["m1", "m2", "m3"]
    assert ids(missing(history, "v2", done={"m1", "m2", "m3"}, parked={"m3"})) == []


def test_a_pair_not_yet_promoted_is_retried_into_the_original_and_a_promoted_one_into_its_latest():
    a = [perceived(1, "x")]
    b = [perceived(2, "y"), promoted("v2"), promoted("v3")]
    groups = by_current_label({"w/a/a": a, "w/b/b": b})
    assert groups == {"": {"w/a/a": a}, "v3": {"w/b/b": b}}
