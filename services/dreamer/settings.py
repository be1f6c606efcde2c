"""When a pair's dream is due and how long it may take (`PEERLOG_DREAM_`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from services.settings_base import prefixed


class DreamSettings(BaseSettings):
    """When the scheduler asks for a dream of a pair, and the dreamer's limits."""

    model_config = prefixed("PEERLOG_DREAM_")

    threshold: int = Field(50, ge=1, description="new explicit observations since the last dream that make one due")
    cooldown_s: float = Field(8 * 3600, ge=0, description="least time between the end of one dream and the next")
    idle_s: float = Field(3600, ge=0, description="how long the observed peer must have been quiet first")
    tick_s: float = Field(60.0, gt=0, description="how often the clock re-checks pairs that wait")
    deduction_rounds: int = Field(12, ge=1, description="tool-round cap of the deduction specialist")
    induction_rounds: int = Field(10, ge=1, description="tool-round cap of the induction specialist")
    max_calls_per_round: int = Field(
        16, ge=1, description="most tool calls of one model turn a specialist runs; the rest are answered as not run"
    )
    max_dream_s: float = Field(
        900.0,
        gt=0,
        description="a dream's whole time budget; one still running then "
        "ends as failed, keeping what it wrote (the worker's poll interval is sized to it)",
    )
