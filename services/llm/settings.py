"""Model, embedding and re-ranking settings (env prefixes PEERLOG_LLM_, PEERLOG_EMBEDDING_, PEERLOG_RERANK_).

`LlmSettings` holds the defaults every stage shares; `LlmSettings.stage(name)` applies that stage's own
overrides, read from `PEERLOG_LLM_<STAGE>_<FIELD>` (e.g. `PEERLOG_LLM_DERIVER_MODEL`).
"""

from __future__ import annotations

import os
from typing import Annotated, Literal, get_args
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource

from services.settings_base import prefixed, variables_said

Stage = Literal[
    "deriver",
    "summarizer",
    "dialectic_minimal",
    "dialectic_low",
    "dialectic_medium",
    "dialectic_high",
    "dialectic_max",
    "deduction",
    "induction",
]
STAGES: tuple[str, ...] = get_args(Stage)

SchemaMode = Literal["json_schema", "json_object_schema", "json_object"]
ToolMode = Literal["native", "structured"]

NO_API_KEY = "none"  # what local servers get when no key is configured; the SDK refuses an empty one


def _model_url(url: str) -> str:
    # the SDK takes a URL without a scheme (127.0.0.1:8080/v1) for a path: every call then failed, and every
    # derivation was dead-lettered. The message leaves the URL out: it may hold credentials
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise ValueError("should be an http:// or https:// URL, such as http://127.0.0.1:8080/v1")
    return url


ModelUrl = Annotated[str, AfterValidator(_model_url)]


class ModelStageSettings(BaseModel):
    """How one stage talks to its chat model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: ModelUrl = "http://127.0.0.1:8080/v1"
    api_key_env: str = Field("PEERLOG_LLM_API_KEY", description="NAME of the env var that holds the key")
    model: str = "qwen2.5-coder-0.5b-instruct"
    temperature: float = Field(0.0, ge=0, le=2)
    max_tokens: int = Field(1024, ge=1, description="most completion tokens per call")
    timeout_s: float = Field(60.0, gt=0, description="per HTTP request")
    max_retries: int = Field(3, ge=0, description="retries after the first try, on transient errors only")
    backoff_s: float = Field(0.5, ge=0, description="first retry delay; doubles (with jitter) each retry")
    max_backoff_s: float = Field(8.0, ge=0, description="longest delay between retries")
    schema_mode: SchemaMode = Field(
        "json_schema",
        description="json_schema: OpenAI's standard form; json_object_schema: {type: json_object, schema} "
        "(llama-cpp-python's server); json_object: plain JSON mode, schema described in the prompt",
    )

    tool_mode: ToolMode = Field(
        "native",
        description="native: OpenAI function tools; structured: the server has no tool calling, so each turn is "
        "a schema-checked object naming a tool or giving the answer (agent stages only)",
    )

    def api_key(self) -> str:
        """The key from the env var named by `api_key_env`, or "none" when it is unset or empty."""
        return os.environ.get(self.api_key_env) or NO_API_KEY


class LlmSettings(ModelStageSettings, BaseSettings):
    """Defaults shared by every stage, from `PEERLOG_LLM_<FIELD>`."""

    model_config = prefixed("PEERLOG_LLM_")

    @model_validator(mode="after")
    def _stages_valid(self) -> LlmSettings:
        # a bad stage override refused at start, not at the stage's first call (in the API's middle of a chat,
        # or as a traceback ending the worker)
        for name in STAGES:
            self.stage(name)
        return self

    def stage(self, name: str) -> ModelStageSettings:
        """This stage's settings: the shared defaults with its `PEERLOG_LLM_<STAGE>_<FIELD>` overrides. A bad
        override is a ValueError naming its variable."""
        if name not in STAGES:
            raise ValueError(f"unknown model stage {name!r}; expected one of {', '.join(STAGES)}")
        prefix = f"PEERLOG_LLM_{name.upper()}_"
        overrides = EnvSettingsSource(type(self), env_prefix=prefix)()
        try:
            return ModelStageSettings(**{**self.model_dump(), **overrides})
        except ValidationError as err:  # the shared defaults are valid: an override is wrong
            raise ValueError(variables_said(err, prefix)) from None


class EmbeddingSettings(BaseSettings):
    """Which embedding model turns text into vectors (one model for the whole store)."""

    model_config = prefixed("PEERLOG_EMBEDDING_")

    provider: Literal["local", "openai"] = Field(
        "local",
        description="local: e5-small-v2, bge-small-en-v1.5 or all-MiniLM-L6-v2 in-process (ONNX); openai: any /v1/embeddings endpoint",
    )
    # e5-small-v2 finds more evidence than bge-small-en-v1.5 on LoCoMo (+0.014 recall@10, +0.013 @25 on
    # the seven conversations apart from conv-26; tests/bench/README.md), which found more than MiniLM;
    # the others stay available (MiniLM needs no Maven fetch)
    model: str = "e5-small-v2"
    # pgvector's HNSW index (message search) takes at most 2,000 dimensions: a larger model is refused at
    # start, not when the index is built
    dimensions: int = Field(384, ge=1, le=2000, description="must match the vector column of the projections")
    base_url: ModelUrl = Field("http://127.0.0.1:8080/v1", description="openai provider's endpoint")
    api_key_env: str = Field("PEERLOG_EMBEDDING_API_KEY", description="NAME of the env var that holds the key")
    batch_size: int = Field(32, ge=1, description="texts per model call")
    # the local models have 512 positions: a longer cut made ONNX Runtime fail on the first long text, an
    # error no caller expects (it ended the worker, on every restart)
    max_length: int = Field(256, ge=8, le=512, description="local model: tokens kept per text (at most 512)")
    # 2,000 characters are about 500 English tokens: within the 512 of most small embedding models (a
    # server refuses a longer text, and would refuse it on every retry), and more than the local models read
    max_chars: int = Field(2000, ge=1, description="openai provider: characters of a text sent (the rest is cut)")
    # 1, not one per core: peerlog embeds short texts from many concurrent calls; measured on 2 cores, a
    # one-query embed costs 4 ms of CPU on 1 thread and 10 ms on 2 (the pool's threads spin-wait)
    threads: int = Field(1, ge=0, description="local model: ONNX Runtime intra-op threads per call (0: one per core)")
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0)
    backoff_s: float = Field(0.5, ge=0)
    max_backoff_s: float = Field(8.0, ge=0)
    query_cache_size: int = Field(
        1024, ge=0, description="API: query vectors remembered, least recently used out first (0: off)"
    )

    def api_key(self) -> str:
        """The key from the env var named by `api_key_env`, or "none" when it is unset or empty."""
        return os.environ.get(self.api_key_env) or NO_API_KEY


class RerankSettings(BaseSettings):
    """The cross-encoder that re-ranks message search's candidates (services/llm/rerank.py)."""

    model_config = prefixed("PEERLOG_RERANK_")

    model: str = Field("ms-marco-MiniLM-L-12-v2", description="empty: re-ranking is off (requests asking fail)")
    # measured on LoCoMo: 25 and 50 candidates lift recall@10 alike; 50 also lifts @25 (tests/bench/README.md)
    candidates: int = Field(50, ge=1, le=200, description="the search's best hits the model reads, at least the limit")
    weight: float = Field(1.0, ge=0, description="weight of the search's own score beside the model's (both z-scored)")
    chat: bool = Field(True, description="Chat's message-search tools re-rank (when a model is set)")
    parallel_runs: int = Field(0, ge=0, description="pairs scored side by side, one core each (0: one per core)")
    max_length: int = Field(256, ge=16, description="tokens of question and message read together")
