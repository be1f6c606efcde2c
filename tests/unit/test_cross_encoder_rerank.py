"""Re-ranking by the cross-encoder: how its scores join the search's, and the real model read from its
pinned wheel."""

from __future__ import annotations

import pytest

from services.llm.errors import RerankError
from services.llm.rerank import (
    LocalCrossEncoder,
    Reranker,
    blended,
    make_reranker,
    passage,
    reranked,
    standardised,
)
from services.llm.settings import RerankSettings

QUESTION = "What instrument does Maria play?"
ANSWER = ("maria", "I practised the violin for three hours yesterday.")
LEXICAL_DISTRACTOR = ("maria", "Playing games with my nephew is my favourite thing to do.")
OFF_TOPIC = ("bob", "The printer jammed again this morning.")


@pytest.fixture(scope="module")
def encoder() -> LocalCrossEncoder:
    return LocalCrossEncoder(RerankSettings())


def test_standardising_equal_scores_gives_zeros_not_a_division_by_zero() -> None:
    assert standardised([2.0, 2.0, 2.0]).tolist() == [0.0, 0.0, 0.0]
    assert standardised([]).tolist() == []


def test_the_model_can_overturn_the_search_order_and_the_weight_bounds_how_far() -> None:
    first_stage = [3.0, 2.0, 1.0]
    cross = [-5.0, 0.0, 5.0]  # the model reverses the order

    assert reranked(blended(first_stage, cross, weight=0.5), 3) == [2, 1, 0]
    assert reranked(blended(first_stage, cross, weight=2.0), 3) == [0, 1, 2]  # the search's order dominates


def test_ties_keep_the_search_order_and_the_limit_cuts_after_ranking() -> None:
    assert reranked([1.0, 5.0, 1.0, 5.0], 3) == [1, 3, 0]


def test_the_real_model_ranks_the_answer_above_a_turn_that_only_shares_its_words(encoder) -> None:
    scores = encoder.score_sync(QUESTION, [passage(*t) for t in (LEXICAL_DISTRACTOR, OFF_TOPIC, ANSWER)])

    assert scores[2] > scores[0] > scores[1]


def test_scores_do_not_depend_on_the_other_candidates_of_the_call(encoder) -> None:
    alone = encoder.score_sync(QUESTION, [passage(*ANSWER)])
    with_others = encoder.score_sync(QUESTION, [passage(*OFF_TOPIC), passage(*ANSWER), passage(*LEXICAL_DISTRACTOR)])

    assert with_others[1] == alone[0]


async def test_rerank_returns_the_best_rows_with_their_new_scores(encoder) -> None:
    rows = [
        {"message_id": "m1", "peer_id": LEXICAL_DISTRACTOR[0], "content": LEXICAL_DISTRACTOR[1], "score": 1.6},
        {"message_id": "m2", "peer_id": OFF_TOPIC[0], "content": OFF_TOPIC[1], "score": 1.0},
        {"message_id": "m3", "peer_id": ANSWER[0], "content": ANSWER[1], "score": 1.5},
    ]

    out = await Reranker(encoder, candidates=50, weight=1.0).rerank(QUESTION, rows, limit=2)

    assert [r["message_id"] for r in out] == ["m3", "m1"]
    assert out[0]["score"] > out[1]["score"]


def test_the_depth_is_the_candidates_setting_or_the_limit_when_larger(encoder) -> None:
    r = Reranker(encoder, candidates=50, weight=1.0)

    assert (r.depth(10), r.depth(80)) == (50, 80)


def test_an_empty_model_turns_reranking_off_and_an_unknown_one_is_refused() -> None:
    assert make_reranker(RerankSettings(model="")) is None
    with pytest.raises(RerankError, match="unknown re-ranking model 'nope'"):
        make_reranker(RerankSettings(model="nope"))
