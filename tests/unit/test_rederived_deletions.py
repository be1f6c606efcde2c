"""A re-derivation deletes its copy of a fact someone deleted through the API (rederive.withheld, withholding)."""

from __future__ import annotations

import math

from projections.deriver_reads import CitedFact
from services.deriver.prompt import ExtractedFact
from services.events import ObservationAdded, ObservationDeleted, ObservationReinforced
from services.events.pairs import Pair
from services.rederivation.rederive import withheld, withholding
from tests.unit.test_deriver_core import P, verdicts

V2 = Pair("w", "a", "a", derivation="v2")
MODEL = "embedder"
THRESHOLD = 0.9


def unit(*xs: float) -> tuple[float, ...]:
    norm = math.sqrt(sum(x * x for x in xs))
    return tuple(x / norm for x in xs)


def fact(oid: str, text: str, messages=("m1",), vector=unit(1, 0), model=MODEL, reason="") -> CitedFact:
    return CitedFact(oid, text, frozenset(messages), vector, model, reason)


DIABETES = fact("o1", "alice has diabetes", reason="false")


def deletions(facts, deleted=(DIABETES,)) -> dict[str, str]:
    return {e.observation_id: e.reason for e in withheld(V2, facts, deleted, THRESHOLD, P, "promote:v2")}


def test_a_fact_derived_again_from_the_message_of_a_deleted_one_is_deleted_with_that_reason():
    [gone] = withheld(V2, [fact("x1", "alice has diabetes")], [DIABETES], THRESHOLD, P, "promote:v2")
    assert (gone.observation_id, gone.derivation, gone.causation_id) == ("x1", "v2", "promote:v2")
    assert gone.reason == "as o1 (the same fact, from the same message) was deleted: false"


def test_a_near_duplicate_from_that_message_is_deleted_too_but_not_a_changed_fact_or_another_models_vector():
    close = unit(1, 0.1)  # cosine 0.995
    assert set(deletions([fact("x1", "alice has type 2 diabetes", vector=close)])) == {"x1"}  # says more
    diagnosed = [fact("o2", "alice was diagnosed on 12 may", reason="false")]
    assert deletions([fact("x2", "alice was diagnosed on 14 may", vector=close)], diagnosed) == {}  # another fact
    assert deletions([fact("x3", "alice has type 2 diabetes", vector=unit(0, 1))]) == {}  # far apart
    assert deletions([fact("x4", "alice has type 2 diabetes", vector=close, model="other")]) == {}


def test_the_same_fact_from_another_message_is_new_evidence_and_stays():
    assert deletions([fact("x1", "alice has diabetes", messages=("m2",))]) == {}
    assert deletions([fact("x1", "alice has diabetes")], deleted=()) == {}


def test_a_proposed_fact_is_compared_by_its_normalised_text_cited_message_and_vector():
    why = withholding([DIABETES], THRESHOLD, MODEL)
    proposed = ExtractedFact(content="Alice  has Diabetes", message_id="m1", span="I have diabetes")
    assert why(proposed, unit(1, 0)) == "as o1 (the same fact, from the same message) was deleted: false"
    assert why(proposed.model_copy(update={"message_id": "m2"}), unit(1, 0)) is None
    assert withholding([], THRESHOLD, MODEL) is None  # nothing deleted: the judge checks nothing


def test_a_deleted_fact_restated_with_a_contraction_is_withheld():
    meat = [fact("o2", "ann doesn't eat meat", reason="false")]
    # cosine 0.986: the new derivation's model spelled it out, the deleted fact must not come back
    assert set(deletions([fact("x1", "ann does not eat meat", vector=unit(1, 0.17))], meat)) == {"x1"}
    said = [fact("o3", "ann does not eat meat", reason="false")]
    assert set(deletions([fact("x2", "ann doesn't eat meat", vector=unit(1, 0.17))], said)) == {"x2"}
    # nor in words the judge would tell apart: one text's content words are all in the other's
    assert set(deletions([fact("x3", "ann would not eat meat", vector=unit(1, 0.17))], meat)) == {"x3"}


def diabetes_from(*messages: str):
    """The judge's verdicts in a re-derivation of m0 and m1 (both "I have diabetes"; o1, derived from m0,
    deleted through the API), the model stating the fact from `messages` in that order."""
    facts = [ExtractedFact(content="alice has diabetes", message_id=m, span="I have diabetes") for m in messages]
    deleted = [fact("o1", "alice has diabetes", messages=("m0",), model="e", reason="false")]
    texts = ("I have diabetes", "I have diabetes, as I said")
    return verdicts(facts, texts=texts, withhold=withholding(deleted, THRESHOLD, "e"))


def live(events) -> dict[str, set[str]]:
    """The observations `events` leave live, with the messages each cites."""
    out: dict[str, set[str]] = {}
    for e in events:
        if isinstance(e, ObservationAdded | ObservationReinforced):
            out.setdefault(e.observation_id, set()).update(s.message_id for s in e.sources)
        elif isinstance(e, ObservationDeleted):
            out.pop(e.observation_id)
    return out


def test_a_restatement_from_another_message_in_the_same_batch_survives_the_withheld_copy():
    out = diabetes_from("m0", "m1")
    assert [type(e) for e in out.events] == [ObservationAdded, ObservationDeleted, ObservationAdded]
    assert out.events[1].reason == "as o1 (the same fact, from the same message) was deleted: false"
    [kept] = live(out.events)
    assert live(out.events) == {kept: {"m1"}} and [k.observation_id for k in out.new_known] == [kept]
    # stated from m1 first, the fact is m1's alone: m0's restatement is no evidence for it
    assert live(diabetes_from("m1", "m0").events) == {"o0": {"m1"}}
