"""The model layer: chat completions (structured and text), embeddings and token counting.

Every chat and embedding call goes through the `openai` client, so any OpenAI-compatible server works.
"""

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
