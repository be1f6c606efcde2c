"""The model layer: chat completions (structured and text), embeddings and token counting.

Every chat and embedding call goes through the `openai` client, so any OpenAI-compatible server works.

The names below are imported on first use (PEP 562), not with the package: every process reads
`services.llm.settings`, but the projector and most CLI commands never call a model, and importing the
`openai` client and numpy with the package took about 1 s of each such process's start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# name -> the module that defines it
_WHERE = {
    **dict.fromkeys(("Completion", "ModelClient", "Usage"), "client"),
    **dict.fromkeys(("Embedder", "LocalOnnxEmbedder", "OpenAIEmbedder", "make_embedder"), "embeddings"),
    **dict.fromkeys(
        (
            "EmbeddingError",
            "ModelError",
            "ModelOutputInvalid",
            "ModelRequestRejected",
            "ModelUnavailable",
            "TokenizerUnavailable",
        ),
        "errors",
    ),
    **dict.fromkeys(("STAGES", "EmbeddingSettings", "LlmSettings", "ModelStageSettings", "Stage"), "settings"),
    **dict.fromkeys(("count_tokens", "encoding", "ensure_ranks", "truncate_to_tokens"), "tokens"),
}
__all__ = [
    "STAGES",
    "Completion",
    "Embedder",
    "EmbeddingError",
    "EmbeddingSettings",
    "LlmSettings",
    "LocalOnnxEmbedder",
    "ModelClient",
    "ModelError",
    "ModelOutputInvalid",
    "ModelRequestRejected",
    "ModelStageSettings",
    "ModelUnavailable",
    "OpenAIEmbedder",
    "Stage",
    "TokenizerUnavailable",
    "Usage",
    "count_tokens",
    "encoding",
    "ensure_ranks",
    "make_embedder",
    "truncate_to_tokens",
]
assert sorted(__all__) == sorted(_WHERE)

if TYPE_CHECKING:
    from services.llm.client import Completion, ModelClient, Usage
    from services.llm.embeddings import Embedder, LocalOnnxEmbedder, OpenAIEmbedder, make_embedder
    from services.llm.errors import (
        EmbeddingError,
        ModelError,
        ModelOutputInvalid,
        ModelRequestRejected,
        ModelUnavailable,
        TokenizerUnavailable,
    )
    from services.llm.settings import STAGES, EmbeddingSettings, LlmSettings, ModelStageSettings, Stage
    from services.llm.tokens import count_tokens, encoding, ensure_ranks, truncate_to_tokens


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value  # looked up once
    return value
