"""Where a model's span is in its message: the message's own words that the span quotes, typography aside.

`services.events.text.normalise` is not used here on purpose: its output keys the stored hashes of observations,
so it must not change, while grounding needs a looser comparison (curly quotes, NFD accents, full-width letters)
and a stricter one (whole words) than a substring test on it."""

from __future__ import annotations

import re
import unicodedata
from array import array
from dataclasses import dataclass
from functools import lru_cache

# characters a model copying a message drops or cannot reproduce: a message's are skipped when matching. A span's
# must be in its message, or a span could add characters the message lacks
INVISIBLE = frozenset("\u00ad\u200b\u200c\u200d\u2060\ufeff")  # soft hyphen, zero-width (non-)joiners and spaces

# typographic forms a model writes in ASCII (or the other way round); NFKC already makes "…" "..." and "Ｉ" "I"
_TYPOGRAPHIC = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u2039\u203a", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb", '"'),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
    }
)
_SPACE = re.compile(r"\s+")
# scripts written without spaces between words: any character boundary in them may start or end a span
_UNSPACED = ("CJK ", "HIRAGANA ", "KATAKANA ", "IDEOGRAPHIC ", "THAI ", "LAO ", "KHMER ", "MYANMAR ", "TIBETAN ", "YI ")


@dataclass(frozen=True)
class Folded:
    """`text` as compared (`_fold`), and for each of its characters the original text's [start, end) it came
    from: the whole cluster (a letter and its marks, a ligature) it is part of."""

    text: str
    starts: array
    ends: array

    def whole(self, at: int, end: int) -> bool:
        """Whether [at, end) of `text` begins and ends with whole clusters of the original text (a span may
        not take "f" of a message's "ﬁ", or an "e" without its accent)."""
        first = at == 0 or self.starts[at - 1] != self.starts[at]
        last = end == len(self.text) or self.starts[end] != self.starts[end - 1]
        return first and last


def locate(span: str, message: str) -> str | None:
    """The text of `message` that `span` quotes, or None: the same after NFKC, case folding, typographic
    quotes and dashes written in ASCII, and white space collapsed; beginning and ending on word boundaries
    ("admin" is not in "badminton")."""
    if any(c in INVISIBLE and c not in message for c in span):
        return None
    wanted = _fold(span).text.strip(" ")
    if not wanted:
        return None
    within = _folded_message(message)
    at = within.text.find(wanted)
    while at != -1:
        end = at + len(wanted)
        if within.whole(at, end) and _bounded(within.text, at, end):
            return message[within.starts[at] : within.ends[end - 1]]
        at = within.text.find(wanted, at + 1)
    return None


@lru_cache(maxsize=64)
def _folded_message(message: str) -> Folded:
    # a window's facts cite a few messages many times each: each is folded once (64 messages of at most 25,000
    # characters, with their offsets at 8 bytes a character, is some 15 MB)
    return _fold(message)


def _fold(text: str) -> Folded:
    """`text` as compared, cluster by cluster, so that each compared character knows where it came from."""
    out: list[str] = []
    starts, ends = array("i"), array("i")
    for start, end in _clusters(text):
        piece = _fold_cluster(text[start:end])
        if piece.startswith(" ") and out and out[-1] == " ":
            piece = piece[1:]  # a run of white space is one space
        out.extend(piece)
        starts.extend([start] * len(piece))
        ends.extend([end] * len(piece))
    return Folded("".join(out), starts, ends)


def _fold_cluster(cluster: str) -> str:
    if cluster.isascii():  # most text: a single character, which NFKC leaves as it is
        return " " if cluster.isspace() else cluster.lower()
    kept = "".join(c for c in cluster if c not in INVISIBLE)
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", kept).casefold())
    return _SPACE.sub(" ", folded.translate(_TYPOGRAPHIC))


def _clusters(text: str):
    """The [start, end) of each cluster of `text`: a character with the marks that follow it, and what else
    NFKC composes with it (Hangul jamo), so that folding the clusters one by one folds the whole text."""
    start = 0
    for i in range(1, len(text)):
        if text[i].isascii() or not _continues(text[start:i], text[i]):  # an ASCII character joins nothing before it
            yield start, i
            start = i
    if text:
        yield start, len(text)


def _continues(cluster: str, c: str) -> bool:
    if unicodedata.combining(c) or unicodedata.category(c).startswith("M"):
        return True
    nfkc = unicodedata.normalize
    return nfkc("NFKC", cluster + c) != nfkc("NFKC", cluster) + nfkc("NFKC", c)


def _bounded(text: str, at: int, end: int) -> bool:
    """Whether text[at:end] neither begins nor ends inside a word."""
    return not (at > 0 and _joined(text[at - 1], text[at])) and not (
        end < len(text) and _joined(text[end - 1], text[end])
    )


def _joined(a: str, b: str) -> bool:
    """Whether `a` followed by `b` is inside one word: both word characters, of a script that spaces its words."""
    return _wordy(a) and _wordy(b) and not (_unspaced(a) or _unspaced(b))


def _wordy(c: str) -> bool:
    return c.isalnum() or c == "_" or unicodedata.category(c).startswith("M")


def _unspaced(c: str) -> bool:
    return not c.isascii() and unicodedata.name(c, "").startswith(_UNSPACED)
