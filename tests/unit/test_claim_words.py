"""What two statements claim, word for word: the words the deriver's judge compares."""

from __future__ import annotations

import pytest

from services.deriver.judge import nested
from services.events.text import claim_words, normalise


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Ann does not eat meat", "Ann doesn't eat meat"),
        ("Ann doesn't eat meat", "Ann does not eat meat"),
        ("Ann will not move", "Ann won't move"),
        ("Ann can not swim", "Ann cannot swim"),
        ("Ann can not swim", "Ann can\u2019t swim"),
    ],
)
def test_a_contracted_restatement_is_the_same_claim(old, new):
    # spelled differently, "doesn't" and "does not" made two facts of one (cosine 0.986 under e5)
    assert claim_words(normalise(old)) == claim_words(normalise(new))
    assert nested(normalise(new), normalise(old))


def test_a_dropped_negation_is_still_another_claim():
    assert not nested(normalise("Ann eats meat"), normalise("Ann doesn't eat meat"))
