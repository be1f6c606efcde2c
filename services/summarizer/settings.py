"""The summarizer's own settings (env prefix PEERLOG_SUMMARIZER_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from services.settings_base import prefixed


class SummarizerSettings(BaseSettings):
    model_config = prefixed("PEERLOG_SUMMARIZER_")

    short_every: int = Field(20, ge=1, description="messages between short summaries")
    long_every: int = Field(60, ge=1, description="messages between long summaries")
    short_max_input_tokens: int = Field(1000, ge=1, description="short summary ≤ 0.75 × min(input tokens, this) words")
    long_max_words: int = Field(3000, ge=1)
    max_input_tokens: int = Field(
        6000,
        ge=100,
        description="most tokens of messages one summary call reads (the oldest pending first; halved after a "
        "prompt past the model's context): what does not fit waits for the next call",
    )
    # the state record holds both kinds' pending text: 2 × 256 KiB plus two previous summaries stays under
    # the broker's default record limit (1 MiB), and 60 messages cut at 4,000 characters fit one kind
    pending_max_bytes: int = Field(
        262_144,
        ge=16_384,
        description="most bytes of pending messages one summary "
        "kind keeps while the model fails; the oldest beyond it are dead-lettered",
    )
