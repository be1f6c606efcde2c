"""Query vectors remembered: the API embeds one query per search, and the same query comes back.

An agent's turn often asks the same thing several times: GetContext for each observer that answers,
then Chat's search tools, with the turn's text as the query. Embedding it costs about 4 ms of CPU on
the local model (services/llm/settings.py), a fifth of a whole GetContext, or an HTTP round trip on an
endpoint. The model is fixed for the life of the process and deterministic, so a remembered vector is
the vector a new call would return.

Only single-text calls are remembered (a search's query). Batches are content being stored (new
observations): they rarely repeat and would push the queries out.
"""

from __future__ import annotations

from collections import OrderedDict

from services.llm.embeddings import Embedder
from services.llm.metrics import QUERY_VECTORS


class QueryVectorCache:
    """An Embedder that remembers the vectors of its last `size` distinct single-text calls, least
    recently used out first. Two concurrent misses for one text both call the model (the second result
    replaces the first, equal to it); no lock is held across a model call."""

    def __init__(self, inner: Embedder, size: int) -> None:
        self.inner = inner
        self.size = size
        self.model_name = inner.model_name
        self.dimensions = inner.dimensions
        self._vectors: OrderedDict[str, list[float]] = OrderedDict()
        self.hits = self.misses = 0

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if len(texts) != 1 or self.size <= 0:
            return await self.inner.embed(texts)
        (text,) = texts
        if (vector := self._vectors.get(text)) is not None:
            self._vectors.move_to_end(text)
            self.hits += 1
            QUERY_VECTORS.labels(outcome="hit").inc()
            return [list(vector)]
        self.misses += 1
        QUERY_VECTORS.labels(outcome="miss").inc()
        vectors = await self.inner.embed(texts)
        self._remember(text, vectors[0])
        return vectors

    def embed_sync(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_sync(texts)

    def _remember(self, text: str, vector: list[float]) -> None:
        self._vectors[text] = list(vector)  # a copy: a caller may change the list it was given
        self._vectors.move_to_end(text)
        while len(self._vectors) > self.size:
            self._vectors.popitem(last=False)

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)  # an HTTP embedder holds connections
        if close is not None:
            await close()
