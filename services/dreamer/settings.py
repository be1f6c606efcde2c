"""The dream scheduler's and dreamer's settings (env prefix PEERLOG_DREAM_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class DreamSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PEERLOG_DREAM_", extra="ignore", frozen=True)

    threshold: int = Field(50, ge=1, description="new explicit observations since the last dream that make one due")
    cooldown_s: float = Field(8 * 3600, ge=0, description="least time between the end of one dream and the next")
    idle_s: float = Field(3600, ge=0, description="how long the observed peer must have been quiet first")
    tick_s: float = Field(60.0, gt=0, description="how often the clock re-checks pairs that wait")
    deduction_rounds: int = Field(12, ge=1, description="tool-round cap of the deduction specialist")
    induction_rounds: int = Field(10, ge=1, description="tool-round cap of the induction specialist")
