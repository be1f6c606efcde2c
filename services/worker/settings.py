"""The processor worker's settings (env prefix PEERLOG_WORKER_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PEERLOG_WORKER_", extra="ignore", frozen=True)

    app_id: str = Field("", description="Faust app id = consumer group and changelog prefix; "
                        "empty: '<topic prefix>processors', so two deployments on one cluster never share state")
    processors: str = Field("router,deriver,summarizer", description="comma-separated processors this group runs")
    commit_interval_s: float = Field(0.1, gt=0, description="how often output and offsets commit (one transaction)")
    data_dir: str = Field(".peerlog/worker", description="Faust's local data directory")

    def app_id_for(self, topic_prefix: str) -> str:
        return self.app_id or f"{topic_prefix}processors"

    def processor_names(self) -> list[str]:
        return [p.strip() for p in self.processors.split(",") if p.strip()]
