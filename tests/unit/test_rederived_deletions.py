"""A re-derivation deletes its copy of a fact someone deleted through the API (rederive.withheld)."""

from __future__ import annotations

import math

from projections.deriver_reads import CitedFact
from services.events import Level, ObservationAdded, PackedVector, Source
from services.events.pairs import Pair
from services.rederivation.rederive import added, withheld
from tests.unit.test_deriver_core import PAIR, P

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


def test_what_a_batch_adds_is_compared_by_its_normalised_text_and_cited_messages():
    event = ObservationAdded(
        **PAIR.fields(),
        observation_id="x1",
        level=Level.EXPLICIT,
        content="Alice  has Diabetes",
        sources=(Source(message_id="m1", span="I have diabetes"),),
        embedding=PackedVector.of([1.0, 0.0]),
        embedding_model=MODEL,
        producer=P,
    )
    [cited] = added([event])
    assert (cited.normalised, cited.message_ids, cited.embedding) == ("alice has diabetes", {"m1"}, (1.0, 0.0))
    assert set(deletions([cited])) == {"x1"}
