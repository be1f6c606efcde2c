"""Settings of the shared infrastructure: the log, the database, the projector and the API.

Each component has its own small class with its own env prefix (`PEERLOG_KAFKA_`, …); processors keep
theirs in their own package; `services.settings.Settings` composes them all.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _prefixed(prefix: str) -> SettingsConfigDict:
    return SettingsConfigDict(env_prefix=prefix, extra="ignore", frozen=True)


class KafkaSettings(BaseSettings):
    """Where the log lives and how topics are laid out."""

    model_config = _prefixed("PEERLOG_KAFKA_")

    bootstrap_servers: str = "127.0.0.1:9092"
    topic_prefix: str = "peerlog."
    partitions: int = Field(6, ge=1, description="partitions per log topic when created")
    replication_factor: int = Field(1, ge=1)
    producer_pool_size: int = Field(
        4, ge=1, description="transactional producers the API rotates through (one open txn each)"
    )
    transaction_timeout_ms: int = 60_000


class DatabaseSettings(BaseSettings):
    """The Postgres (with pgvector) that holds the projections."""

    model_config = _prefixed("PEERLOG_DATABASE_")

    url: str = "postgresql+psycopg://peerlog@127.0.0.1:5432/peerlog"
    schema_name: str = Field("peerlog", description="schema that reads are served from")
    pool_size: int = 10


class ProjectorSettings(BaseSettings):
    """How the projector batches the log into Postgres."""

    model_config = _prefixed("PEERLOG_PROJECTOR_")

    group_id: str = "peerlog-projector"
    max_batch: int = Field(2000, ge=1, description="events applied per transaction, at most")
    poll_timeout_s: float = 0.05


class ApiSettings(BaseSettings):
    """The gRPC front door."""

    model_config = _prefixed("PEERLOG_API_")

    host: str = "127.0.0.1"
    port: int = 50051
    consistency_wait_s: float = Field(
        10.0, description="longest a read waits for the projections to reach a consistency token"
    )
    metrics_port: int = Field(0, ge=0, description="serve Prometheus metrics on this port (0: off)")


class WorkerSettings(BaseSettings):
    """The processor worker (`peerlog worker`)."""

    model_config = _prefixed("PEERLOG_WORKER_")

    app_id: str = Field("", description="consumer-group and changelog prefix; empty: '<topic prefix>processors', "
                        "so two deployments on one cluster never share state")
    processors: str = Field("router,deriver,summarizer,embedder", description="comma-separated processors this worker runs")
    deriver_instances: int = Field(4, ge=1, description="deriver group members in this worker: model calls of "
                                   "different partitions overlap, each in its own transaction")
    metrics_port: int = Field(0, ge=0, description="serve Prometheus metrics (model tokens, calls) on this port (0: off)")

    def app_id_for(self, topic_prefix: str) -> str:
        return self.app_id or f"{topic_prefix}processors"

    def processor_names(self) -> list[str]:
        return [p.strip() for p in self.processors.split(",") if p.strip()]
