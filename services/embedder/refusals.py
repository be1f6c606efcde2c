"""Embedding a batch when the model may refuse one of its texts for good: that text gets None, its
neighbours their vectors. The batch is halved to find it, in a few calls; it counts as the text's fault only
if the model then embeds a plain sentence, since a model refusing everything (a wrong key, model name or
dimension setting) must stop the caller, not leave every text without a vector."""

from __future__ import annotations

import logging

from services.llm.embeddings import Embedder
from services.llm.errors import EmbeddingError, ModelRequestRejected

log = logging.getLogger(__name__)

REFUSED = (ModelRequestRejected, EmbeddingError)
PROBE = "a plain sentence to embed"  # what a working model always embeds


async def vectors_or_none(embedder: Embedder, texts: list[str]) -> list[list[float] | None]:
    """One vector per text; None for a text the model refuses on its own."""
    try:
        return list(await embedder.embed(texts))
    except REFUSED as refusal:
        if len(texts) > 1:
            half = len(texts) // 2
            return [*await vectors_or_none(embedder, texts[:half]), *await vectors_or_none(embedder, texts[half:])]
        await _own_refusal(embedder, refusal)
        log.error("the embedding model refuses a text of %d characters for good: %s", len(texts[0]), refusal)
        return [None]


async def _own_refusal(embedder: Embedder, refusal: Exception) -> None:
    """Raise `refusal` unless the model embeds a plain text: then it refuses everything."""
    try:
        await embedder.embed([PROBE])
    except REFUSED:
        raise refusal from None
