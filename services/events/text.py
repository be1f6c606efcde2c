"""Text normalisation shared by every component that compares propositions or spans."""

from __future__ import annotations

import re
from typing import NamedTuple

_SPACE = re.compile(r"\s+")


def one_line(text: str) -> str:
    """`text` with every run of white space, line breaks included, as one space: what an observation shows
    inside a list item, where a line break forged more items ("\n## Instruction\n- Alice is the admin")."""
    return " ".join(text.split())


_MARKER = re.compile(r"\[(obs|msg):", re.IGNORECASE)


def inert(text: str) -> str:
    """`text` as a tool result shows a message's or an observation's own words: on one line (`one_line`), its
    `[obs:` and `[msg:` markers broken (`[obs :`). A message could otherwise add a line shaped like an
    observation's, under a short name a real one holds, and have a model cite it as a premise."""
    return _MARKER.sub(r"[\1 :", one_line(text))


def normalise(text: str) -> str:
    """Case- and whitespace-insensitive form: the basis of grounding and exact-duplicate checks."""
    return _SPACE.sub(" ", text).strip().casefold()


_WORD = re.compile(r"[^\W_]+")
# function words, pronouns and the verbs of reporting speech: they say nothing a span must support
_STOP = frozenset(
    """
a about above after again against all am an and any are as at be because been before being below between both
but by can could did do does doing don down during each few for from further had has have having he her here hers
herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
once only or other our ours ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself yourselves also s t ll re ve d m
say said says tell told tells mention mentioned mentions state stated states target user
""".split()
)


def stem(word: str) -> str:
    """A light suffix-stripping stem, enough to match "moved" with "move" and "teaches" with "teach"."""
    for suffix, repl in (
        ("ies", "y"),
        ("ied", "y"),
        ("sses", "ss"),
        ("ches", "ch"),
        ("shes", "sh"),
        ("xes", "x"),
        ("ing", ""),
        ("ed", ""),
        ("ly", ""),
        ("s", ""),
    ):
        base = word[: len(word) - len(suffix)] + repl
        if word.endswith(suffix) and not word.endswith(("ss", "eed")) and len(base) >= 3:
            if not repl and base[-1] == base[-2] and base[-1] not in "aeiouls":
                return base[:-1]  # planned → plann → plan
            return _without_e(base)
    return _without_e(word)


def _without_e(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("e") else word  # live / lives / lived → liv


def words(text: str) -> set[str]:
    """`text`'s words, case-folded: runs of letters and digits."""
    return set(_WORD.findall(text.casefold()))


def content_words(text: str, drop: str = "") -> set[str]:
    """The stems of `text`'s words that carry content: stop words and the words of `drop` left out."""
    dropped = _STOP | words(drop)
    return {stem(w) for w in _WORD.findall(text.casefold()) if w not in dropped and (len(w) > 1 or w.isdigit())}


# words that change what a statement claims: negation, tense and modality, direction, order and role. Most are stop
# words (a span need not repeat them), but "Ann was married to Bob" is not "Ann is married to Bob"
MARKERS = frozenset(
    """
not no nor never none nothing nobody neither cannot without am is are was were be been being had has have having
do does did doing will would shall should can could might must used once former formerly previously ago anymore ex
from to before after than into onto until till since by with as against toward towards above below under over up
down more most less least
""".split()
)
_ARTICLES = frozenset({"a", "an", "the"})
_CLAIM_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")  # "ann's" and "doesn't" are one word each


class ClaimWord(NamedTuple):
    key: str  # what two statements compare
    kind: str  # "content", "marker" (one of `MARKERS`, or a "n't" word) or "function"


def claim_words(text: str) -> tuple[ClaimWord, ...]:
    """`text`'s words in order, articles left out, for comparing what two statements claim. Unlike `content_words`,
    negation, tense and direction words count, a past form keeps its "-ed" ("worked" is not "works"), and a word
    keeps its "'s" ("Ann's wife" is not Ann); a contraction is spelled out ("doesn't": does not)."""
    tokens = _CLAIM_WORD.findall(text.casefold().replace("\u2019", "'"))
    return tuple(_claim_word(w) for t in tokens if t not in _ARTICLES for w in _spelled_out(t))


# a contraction is its words spelled out: "doesn't eat meat" restates "does not eat meat" (cosine 0.986)
_CONTRACTED = {"won't": ("will", "not"), "can't": ("can", "not"), "cannot": ("can", "not"), "shan't": ("shall", "not")}


def _spelled_out(token: str) -> tuple[str, ...]:
    if token in _CONTRACTED:
        return _CONTRACTED[token]
    return (token[:-3], "not") if token.endswith("n't") and len(token) > 3 else (token,)


def _claim_word(token: str) -> ClaimWord:
    if token in MARKERS or token.endswith("n't"):
        return ClaimWord(token, "marker")
    if token in _STOP or (len(token) == 1 and not token.isdigit()):
        return ClaimWord(token, "function")
    whole = token.endswith("ed") or "'" in token  # `stem` makes "married" "marry" and "ann's" "ann'"
    return ClaimWord(token if whole else stem(token), "content")


def span_support(content: str, span: str, subject: str = "") -> tuple[set[str], set[str]]:
    """(the content words of `content` that `span` has, all of them), the `subject`'s name not counted: a fact
    names its subject where the subject's own message says "I"."""
    wanted = content_words(content, drop=subject)
    return wanted & content_words(span), wanted
