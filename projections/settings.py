"""Settings of the Postgres that holds the projections (`PEERLOG_DATABASE_`) and of the projector
(`PEERLOG_PROJECTOR_`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from services.settings_base import prefixed


class DatabaseSettings(BaseSettings):
    """The Postgres (with pgvector) that holds the projections."""

    model_config = prefixed("PEERLOG_DATABASE_")

    url: str = "postgresql+psycopg://peerlog@127.0.0.1:5432/peerlog"
    schema_name: str = Field("peerlog", description="schema that reads are served from")
    pool_size: int = 10


class ProjectorSettings(BaseSettings):
    """How the projector batches the log into Postgres."""

    model_config = prefixed("PEERLOG_PROJECTOR_")

    group_id: str = "peerlog-projector"
    max_batch: int = Field(2000, ge=1, description="events applied per transaction, at most")
    poll_timeout_s: float = 0.05
    metrics_port: int = Field(
        0,
        ge=0,
        description="serve Prometheus metrics (lag per topic, derivations, dreams, dead letters) on this port (0: off)",
    )
    metrics_host: str = Field("127.0.0.1", description="address the metrics endpoint binds (no authentication)")
