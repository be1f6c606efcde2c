"""The ranking sweep changes the constants the search statement is built from, and only for its variant."""

from __future__ import annotations

import pytest

from projections import lexical_terms, message_ranking, message_search
from tests.bench.ranking_sweep import changed, parsed


def test_a_variant_rebuilds_the_statement_with_its_values_and_restores_the_recipe_after() -> None:
    shape = message_search.Shape(vector=False, text=True)

    def bound() -> list:
        return list(message_search.fused(shape).compile().params.values())

    weight, b = message_search.SESSION_WEIGHT, lexical_terms.BM25_B
    with changed(parsed("SESSION_WEIGHT=0.123,BM25_B=0.456")):
        assert (message_search.SESSION_WEIGHT, lexical_terms.BM25_B) == (0.123, 0.456)
        assert message_ranking.SESSION_WEIGHT == 0.123  # every module that holds the name
        assert 0.123 in bound() and 0.456 in bound()  # the cached statement was built again
    assert (message_search.SESSION_WEIGHT, lexical_terms.BM25_B) == (weight, b)
    assert weight in bound() and 0.123 not in bound() and 0.456 not in bound()


def test_a_misspelt_constant_is_refused_rather_than_measured_as_the_recipe() -> None:
    with pytest.raises(SystemExit, match="SESION_WEIGHT"):
        parsed("SESION_WEIGHT=0.5")


def test_integer_constants_keep_their_type() -> None:
    with changed(parsed("SHORT_LEXEMES=12")):
        assert message_search.SHORT_LEXEMES == 12 and isinstance(message_search.SHORT_LEXEMES, int)
