"""The deriver's own settings (env prefix PEERLOG_DERIVER_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from services.settings_base import prefixed


class DeriverSettings(BaseSettings):
    model_config = prefixed("PEERLOG_DERIVER_")

    batch_tokens: int = Field(512, ge=1, description="derive a pair once its pending messages reach this many tokens")
    max_wait_s: float = Field(1800, gt=0, description="…or once the oldest pending message has waited this long")
    flush: bool = Field(False, description="derive every message at once (no batching)")
    window_tokens: int = Field(1024, ge=64, description="most tokens of turns in one model call")
    tick_s: float = Field(30.0, gt=0, description="how often the clock checks waiting pairs")
    near_duplicate: float | None = Field(
        None,
        gt=0,
        le=1,
        description="cosine similarity that counts as the same fact; unset: the embedding model's own"
        " (0.975 for e5-small-v2, 0.95 for the others)",
    )
    recent_cache: int = Field(64, ge=0, description="own recent observations kept in state for dedup")
    output_attempts: int = Field(
        2,
        ge=1,
        description="extractions asked (each with its repair) before a batch whose replies never validate is"
        " dead-lettered",
    )
    store_retries: int = Field(3, ge=0, description="retries of a projection read the database refused or dropped")
    store_backoff_s: float = Field(0.5, ge=0, description="first delay between those retries; doubles (with jitter)")
    store_max_backoff_s: float = Field(8.0, ge=0, description="longest delay between those retries")
