"""The dreamer's edit core: premises checked, refusals recorded, knowledge updates supersede, patterns graded."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from services.dreamer.edits import (
    AddContradiction,
    AddDeduction,
    AddPattern,
    Dream,
    DreamWrites,
    NamedObservation,
    RemoveDeduction,
    SetPeerCard,
    UpdateKnowledge,
    decide_edit,
    named_ids,
)
from services.events import (
    PAIR_WIDE,
    ObservationAdded,
    ObservationDeleted,
    ObservationRejected,
    ObservationSuperseded,
    PeerCardUpdated,
    ProducerInfo,
)

D = Dream(
    "w",
    "alice",
    "bob",
    "dream-1",
    ProducerInfo(component="dreamer", version="0", model="m", prompt_version="deduction-1"),
    "req-1",
)
KNOWN = {
    "oslo": NamedObservation("alice", "bob", "explicit", True),
    "bees": NamedObservation("alice", "bob", "explicit", True),
    "market": NamedObservation("alice", "bob", "explicit", True),
    "old": NamedObservation("alice", "bob", "explicit", False),
    "carols": NamedObservation("carol", "bob", "explicit", True),
    "ded": NamedObservation("alice", "bob", "deductive", True),
}


def test_a_deduction_with_live_premises_of_the_pair_is_written_with_the_dream_id():
    out = decide_edit(DreamWrites(), KNOWN, AddDeduction(content="Bob lives in Norway", premise_ids=["oslo"]), D)
    (added,) = out.events
    assert isinstance(added, ObservationAdded) and out.accepted
    assert (added.level.value, added.premise_ids, added.dream_id, added.causation_id) == (
        "deductive",
        ("oslo",),
        "dream-1",
        "req-1",
    )
    assert out.pending.added == {added.observation_id: "deductive"}


def test_a_deduction_without_premises_or_citing_another_pair_is_refused_and_recorded():
    for premises, why in (
        ([], "at least 1"),
        (["carols"], "store of (carol, bob)"),
        (["nope"], "is not an observation of (alice, bob)"),
        (["old"], "superseded or deleted"),
    ):
        out = decide_edit(DreamWrites(), KNOWN, AddDeduction(content="x", premise_ids=premises), D)
        (rejected,) = out.events
        assert isinstance(rejected, ObservationRejected) and not out.accepted
        assert why in rejected.reason and why in out.reply and rejected.dream_id == "dream-1"


def test_induction_refuses_fewer_than_two_premises_and_grades_confidence_by_count():
    one = decide_edit(DreamWrites(), KNOWN, AddPattern(content="p", pattern_type="tendency", premise_ids=["oslo"]), D)
    assert isinstance(one.events[0], ObservationRejected) and "at least 2" in one.reply
    known = {**KNOWN, **{f"e{i}": NamedObservation("alice", "bob", "explicit", True) for i in range(5)}}
    grades = [
        decide_edit(
            DreamWrites(),
            known,
            AddPattern(content="p", pattern_type="preference", premise_ids=[f"e{i}" for i in range(n)]),
            D,
        )
        .events[0]
        .confidence
        for n in (2, 3, 4, 5)
    ]
    assert grades == ["low", "medium", "medium", "high"]


def test_a_knowledge_update_writes_the_new_belief_then_supersedes_the_old_one():
    out = decide_edit(
        DreamWrites(),
        KNOWN,
        UpdateKnowledge(outdated_id="oslo", content="Bob moved to Bergen", premise_ids=["bees"], reason="moved"),
        D,
    )
    added, superseded = out.events
    assert isinstance(superseded, ObservationSuperseded)
    assert (superseded.observation_id, superseded.superseded_by) == ("oslo", added.observation_id)
    again = decide_edit(out.pending, KNOWN, UpdateKnowledge(outdated_id="oslo", content="y", premise_ids=["bees"]), D)
    assert "already superseded" in again.reply
    cite_old = decide_edit(out.pending, KNOWN, AddDeduction(content="z", premise_ids=["oslo"]), D)
    assert "superseded or deleted" in cite_old.reply


def test_what_replaces_a_clients_observation_is_in_every_derivation_as_the_observation_was():
    known = {**KNOWN, "peanuts": NamedObservation("alice", "bob", "explicit", True, "bob is allergic", PAIR_WIDE)}
    update = UpdateKnowledge(outdated_id="peanuts", content="Bob outgrew the allergy", premise_ids=["bees"])
    added, superseded = decide_edit(DreamWrites(), known, update, replace(D, derivation="v2")).events
    assert (added.derivation, superseded.derivation) == (PAIR_WIDE, "v2")  # a promotion keeps the update
    mine = decide_edit(DreamWrites(), KNOWN, update.model_copy(update={"outdated_id": "oslo"}), D)
    assert mine.events[0].derivation == ""  # the dream's own derivation's fact: replaced in it


def test_a_second_update_of_what_replaced_a_clients_observation_stays_in_every_derivation():
    known = {**KNOWN, "peanuts": NamedObservation("alice", "bob", "explicit", True, "bob is allergic", PAIR_WIDE)}
    d = replace(D, derivation="v2")
    first = decide_edit(
        DreamWrites(), known, UpdateKnowledge(outdated_id="peanuts", content="y", premise_ids=["bees"]), d
    )
    y = first.events[0].observation_id
    second = decide_edit(first.pending, known, UpdateKnowledge(outdated_id=y, content="z", premise_ids=["bees"]), d)
    # z went to v2 alone and retired y from every derivation: promoted back, the pair lost the fact
    assert second.events[0].derivation == PAIR_WIDE


def test_a_later_edit_may_cite_an_earlier_one_of_the_same_dream():
    first = decide_edit(DreamWrites(), KNOWN, AddDeduction(content="Bob lives in Norway", premise_ids=["oslo"]), D)
    new_id = first.events[0].observation_id
    second = decide_edit(first.pending, KNOWN, AddContradiction(content="c", premise_ids=[new_id, "bees"]), D)
    assert second.accepted and second.events[0].premise_ids == (new_id, "bees")


def test_only_deductions_can_be_removed_and_cards_follow_the_card_rules():
    assert (
        "only deductive"
        in decide_edit(DreamWrites(), KNOWN, RemoveDeduction(observation_id="oslo", reason="r"), D).reply
    )
    removed = decide_edit(DreamWrites(), KNOWN, RemoveDeduction(observation_id="ded", reason="stale"), D)
    assert isinstance(removed.events[0], ObservationDeleted) and "ded" in removed.pending.retired
    bad = decide_edit(DreamWrites(), KNOWN, SetPeerCard(entries=["Bob is nice"]), D)
    assert bad.events == [] and "must start with" in bad.reply
    good = decide_edit(DreamWrites(), KNOWN, SetPeerCard(entries=["IDENTITY: Bob"]), D)
    assert isinstance(good.events[0], PeerCardUpdated)


def test_an_empty_card_is_refused_over_a_card_with_entries_and_allowed_over_an_empty_one():
    curated = ("IDENTITY: Bob", "INSTRUCTION: call him Rob")
    wipe = decide_edit(DreamWrites(), KNOWN, SetPeerCard(entries=[]), D, card=curated)
    assert wipe.events == [] and "an empty card would erase all 2 entries" in wipe.reply
    assert decide_edit(DreamWrites(), KNOWN, SetPeerCard(entries=[]), D, card=()).accepted


def test_the_shell_looks_up_every_id_an_action_names():
    assert named_ids(UpdateKnowledge(outdated_id="o", content="c", premise_ids=["a", "b"])) == ["a", "b", "o"]


def test_an_id_copied_with_its_marker_is_read_as_the_bare_id():
    action = AddPattern(content="p", pattern_type="tendency", premise_ids=["obs:bees", "[obs:market]"])
    assert action.premise_ids == ["bees", "market"]
    assert RemoveDeduction(observation_id="[obs:ded]", reason="r").observation_id == "ded"


def test_the_same_conclusion_twice_in_one_dream_is_refused_the_second_time():
    first = decide_edit(DreamWrites(), KNOWN, AddDeduction(content="Bob lives in Norway", premise_ids=["oslo"]), D)
    again = decide_edit(first.pending, KNOWN, AddDeduction(content="bob lives in  Norway", premise_ids=["oslo"]), D)
    assert not again.accepted and "already wrote that" in again.reply


def test_a_dream_writes_into_the_derivation_current_when_it_began_and_the_card_stays_per_pair():
    from dataclasses import replace

    d = replace(D, derivation="v2")
    in_v2 = {i: replace(k, derivation="v2") for i, k in KNOWN.items()}
    update = UpdateKnowledge(outdated_id="oslo", content="Bob moved to Bergen", premise_ids=["bees"])
    out = decide_edit(DreamWrites(), in_v2, update, d)
    assert [type(e) for e in out.events] == [ObservationAdded, ObservationSuperseded]
    assert {e.derivation for e in out.events} == {"v2"}
    card = decide_edit(DreamWrites(), in_v2, SetPeerCard(entries=["IDENTITY: Bob"]), d)
    assert isinstance(card.events[0], PeerCardUpdated)


def test_a_dream_retires_nothing_of_another_derivation_of_the_pair():
    staged = {**KNOWN, "v2-oslo": NamedObservation("alice", "bob", "explicit", True, "Bob lives in Oslo", "v2")}
    update = UpdateKnowledge(outdated_id="v2-oslo", content="Bob moved to Bergen", premise_ids=["bees"])
    out = decide_edit(DreamWrites(), staged, update, D)
    assert not out.accepted and "another derivation" in out.reply
    assert not any(isinstance(e, ObservationSuperseded) for e in out.events)


def test_a_conclusion_that_only_restates_a_premise_is_refused_and_recorded():
    known = {**KNOWN, "oslo": NamedObservation("alice", "bob", "explicit", True, "Bob lives in Oslo")}
    out = decide_edit(
        DreamWrites(),
        known,
        AddPattern(content="bob lives in  Oslo", pattern_type="tendency", premise_ids=["bees", "oslo"]),
        D,
    )
    (refused,) = out.events
    assert isinstance(refused, ObservationRejected) and not out.accepted
    assert "restates its premise oslo" in out.reply


def test_a_conclusion_that_restates_what_this_dream_wrote_before_is_refused_too():
    first = decide_edit(DreamWrites(), KNOWN, AddDeduction(content="Bob lives in Norway", premise_ids=["oslo"]), D)
    written = first.events[0].observation_id
    again = decide_edit(
        first.pending,
        KNOWN,
        AddPattern(content="Bob lives in Norway", pattern_type="tendency", premise_ids=[written, "bees"]),
        D,
    )
    assert not again.accepted and f"restates its premise {written}" in again.reply


def test_a_conclusion_that_copies_a_live_belief_it_does_not_cite_is_refused():
    known = {**KNOWN, "norway": NamedObservation("alice", "bob", "deductive", True, "Bob lives in Norway")}
    out = decide_edit(DreamWrites(), known, AddDeduction(content="bob lives in  NORWAY", premise_ids=["oslo"]), D)
    assert not out.accepted and isinstance(out.events[0], ObservationRejected)
    assert "observation norway already says that" in out.reply


def test_a_belief_that_was_superseded_may_be_written_again():
    known = {**KNOWN, "norway": NamedObservation("alice", "bob", "deductive", False, "Bob lives in Norway")}
    out = decide_edit(DreamWrites(), known, AddDeduction(content="Bob lives in Norway", premise_ids=["oslo"]), D)
    assert out.accepted


def test_a_dream_does_not_rewrite_a_conclusion_deleted_from_the_same_premises():
    deleted = NamedObservation(
        "alice", "bob", "deductive", False, "Bob lives in Norway", deleted=True, premise_ids=("oslo",)
    )
    known = {**KNOWN, "norway": deleted}
    for premises in (["oslo"], ["oslo", "bees"]):  # the same premises, or more around them
        out = decide_edit(DreamWrites(), known, AddDeduction(content="bob lives in  NORWAY", premise_ids=premises), D)
        (refused,) = out.events
        assert isinstance(refused, ObservationRejected) and not out.accepted and out.pending == DreamWrites()
        assert "observation norway said that and was deleted" in refused.reason and "norway" in out.reply
        assert refused.premise_ids == tuple(premises) and refused.dream_id == "dream-1"
    # other evidence may conclude it anew; a deletion in another pair's store says nothing of this one
    assert decide_edit(
        DreamWrites(), known, AddDeduction(content="Bob lives in Norway", premise_ids=["bees"]), D
    ).accepted
    elsewhere = {**KNOWN, "norway": replace(deleted, observer_id="carol")}
    assert decide_edit(
        DreamWrites(), elsewhere, AddDeduction(content="Bob lives in Norway", premise_ids=["oslo"]), D
    ).accepted


def test_a_knowledge_update_citing_the_observation_it_replaces_is_refused_and_recorded():
    # the new belief would be born resting on a superseded premise
    out = decide_edit(
        DreamWrites(),
        KNOWN,
        UpdateKnowledge(
            outdated_id="oslo", content="Bob moved to Bergen", premise_ids=["bees", "oslo"], reason="moved"
        ),
        D,
    )
    (rejected,) = out.events
    assert isinstance(rejected, ObservationRejected) and not out.accepted
    assert "rests on the observation it replaces" in rejected.reason and "oslo" in out.reply
    assert rejected.premise_ids == ("bees", "oslo") and rejected.dream_id == "dream-1"
    assert out.pending == DreamWrites()


def test_a_knowledge_update_resting_on_its_outdated_observation_through_a_fresh_deduction_is_refused():
    made = decide_edit(DreamWrites(), KNOWN, AddDeduction(content="Bob is Norwegian", premise_ids=["oslo"]), D)
    assert made.accepted
    fresh = made.events[0].observation_id
    update = UpdateKnowledge(outdated_id="oslo", content="Bob left Oslo", premise_ids=[fresh], reason="moved")
    out = decide_edit(made.pending, made.pending.overlay(D, KNOWN), update, D)
    assert not out.accepted and "through a deduction of this dream" in out.reply
    assert not any(isinstance(e, ObservationSuperseded) for e in out.events)


@pytest.mark.parametrize("action", [AddDeduction, AddContradiction])
def test_a_dream_observation_that_is_only_white_space_is_refused_to_the_model_not_stored(action):
    # "  \n " passed min_length=1 and was stored; the API refuses blank observations
    with pytest.raises(ValidationError, match="is blank"):
        action(content="  \n ", premise_ids=["oslo", "bergen"])
