"""Settings of the processor worker (`peerlog worker`, `PEERLOG_WORKER_`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from services.settings_base import prefixed


class WorkerSettings(BaseSettings):
    """The processor worker (`peerlog worker`)."""

    model_config = prefixed("PEERLOG_WORKER_")

    app_id: str = Field(
        "",
        description="consumer-group and changelog prefix; empty: '<topic prefix>processors', "
        "so two deployments on one cluster never share state",
    )
    processors: str = Field(
        "router,deriver,summarizer,embedder,dream-scheduler,dreamer",
        description="comma-separated processors this worker runs",
    )
    deriver_instances: int = Field(
        4,
        ge=1,
        description="deriver group members in this worker: model calls of "
        "different partitions overlap, each in its own transaction",
    )
    metrics_port: int = Field(
        0, ge=0, description="serve Prometheus metrics (model calls, transactions) on this port (0: off)"
    )
    metrics_host: str = Field("127.0.0.1", description="address the metrics endpoint binds (no authentication)")
    stall_report_s: float = Field(
        60.0,
        ge=0,
        description="when the worker's event loop has not run for this long (a call stuck holding the "
        "interpreter lock), write every thread's stack to stderr, again as often while it lasts (0: off)",
    )

    def app_id_for(self, topic_prefix: str) -> str:
        return self.app_id or f"{topic_prefix}processors"

    def processor_names(self) -> list[str]:
        return [p.strip() for p in self.processors.split(",") if p.strip()]
