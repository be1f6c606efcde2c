"""Text normalisation shared by every component that compares propositions or spans."""

from __future__ import annotations

import re

_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """Case- and whitespace-insensitive form: the basis of grounding and exact-duplicate checks."""
    return _SPACE.sub(" ", text).strip().casefold()
