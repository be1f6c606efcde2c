"""Naive retrieval baselines for the LoCoMo bench, computed per conversation over the turns the bench posts.

- bm25: Okapi BM25 (k1 = 1.2, b = 0.75, idf = ln(1 + (N - n + 0.5) / (n + 0.5))) over the turn text as
  posted; text and question tokenised alike: lowercase `\\w+`, NLTK's English stop words removed. Any-word
  match: every turn sharing at least one question token is ranked, by the sum over the distinct question
  tokens; the others are not ranked at all.
- minilm: cosine between all-MiniLM-L6-v2 embeddings of the bare question and of
  "[<day> <Month> <Year>] <speaker>: <text>" (the date of the turn's session); every turn is ranked.
- rrf: reciprocal rank fusion (k = 60) of those two full rankings.

Ties keep the order of the turns in the conversation.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

import numpy as np

# NLTK's English list (179 words) without its forms with an apostrophe: `\w+` splits those ("don't" →
# "don", "t") into parts that are on the list already
STOP_WORDS = frozenset(
    """
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers
herself it its itself they them their theirs themselves what which who whom this that these those am is
are was were be been being have has had having do does did doing a an the and but if or because as until
while of at by for with about against between into through during before after above below to from up
down in out on off over under again further then once here there when where why how all any both each few
more most other some such no nor not only own same so than too very s t can will just don should now d ll
m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren
won wouldn
""".split()
)
TOKEN = re.compile(r"\w+")
K1, B = 1.2, 0.75
RRF_K = 60
NAMES = ("bm25", "minilm", "rrf")

Embed = Callable[[list[str]], list[list[float]]]


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str  # as posted, photo caption included
    day: date  # its session's date


def tokens(text: str) -> list[str]:
    return [t for t in TOKEN.findall(text.lower()) if t not in STOP_WORDS]


def dated(turn: Turn) -> str:
    """The text minilm embeds for a turn: '[8 May 2023] Caroline: …'."""
    return f"[{turn.day.day} {turn.day:%B %Y}] {turn.speaker}: {turn.text}"


class Bm25:
    """An inverted index over one conversation's turns."""

    def __init__(self, texts: list[str]) -> None:
        docs = [Counter(tokens(t)) for t in texts]
        self.lengths = np.array([sum(d.values()) for d in docs], dtype=float)
        self.postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, doc in enumerate(docs):
            for term, tf in doc.items():
                self.postings[term].append((i, tf))
        average = self.lengths.mean() if len(docs) else 0.0
        # the length part of the denominator depends on the turn only: computed once
        self.norm = K1 * (1 - B + B * self.lengths / max(average, 1e-9))

    def idf(self, term: str) -> float:
        n = len(self.postings.get(term, ()))
        return math.log(1 + (len(self.lengths) - n + 0.5) / (n + 0.5))

    def rank(self, query: str) -> list[int]:
        """Indexes of the turns sharing a token with `query`, best first."""
        scores: dict[int, float] = defaultdict(float)
        for term in set(tokens(query)):
            idf = self.idf(term)
            for i, tf in self.postings.get(term, ()):
                scores[i] += idf * tf * (K1 + 1) / (tf + self.norm[i])
        return sorted(scores, key=lambda i: (-scores[i], i))


def minilm_rankings(turns: list[Turn], queries: list[str], embed: Embed) -> list[list[int]]:
    """Per query, every turn's index by cosine, best first (the embedder returns unit vectors)."""
    if not turns or not queries:
        return [[] for _ in queries]
    docs = np.asarray(embed([dated(t) for t in turns]), dtype=np.float32)
    asked = np.asarray(embed(queries), dtype=np.float32)
    # stable sort of the negated scores: ties keep turn order
    return np.argsort(-(asked @ docs.T), axis=1, kind="stable").tolist()


def rrf(*rankings: list[int]) -> list[int]:
    scores: dict[int, float] = defaultdict(float)
    for ranking in rankings:
        for rank, i in enumerate(ranking, start=1):
            scores[i] += 1 / (RRF_K + rank)
    return sorted(scores, key=lambda i: (-scores[i], i))


def rank(turns: list[Turn], queries: list[str], embed: Embed, depth: int = 25) -> dict[str, list[list[str]]]:
    """For each baseline in NAMES, per query, the dia_ids of its top `depth` turns."""
    index = Bm25([t.text for t in turns])
    lexical = [index.rank(q) for q in queries]
    semantic = minilm_rankings(turns, queries, embed)
    fused = [rrf(a, b) for a, b in zip(lexical, semantic, strict=True)]
    return {
        name: [[turns[i].dia_id for i in r[:depth]] for r in ranked]
        for name, ranked in zip(NAMES, (lexical, semantic, fused), strict=True)
    }
