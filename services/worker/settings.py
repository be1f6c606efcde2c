"""The processor worker's settings (env prefix PEERLOG_WORKER_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PEERLOG_WORKER_", extra="ignore", frozen=True)

    app_id: str = Field("peerlog-processors", description="Faust app id = consumer group; same for all workers of a group")
    processors: str = Field("router,deriver,summarizer", description="comma-separated processors this group runs")
    commit_interval_s: float = Field(0.1, gt=0, description="how often output and offsets commit (one transaction)")
    data_dir: str = Field(".peerlog/worker", description="Faust's local data directory")

    def processor_names(self) -> list[str]:
        return [p.strip() for p in self.processors.split(",") if p.strip()]
