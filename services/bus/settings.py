"""Settings of the log (`PEERLOG_KAFKA_`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from services.settings_base import prefixed


class KafkaSettings(BaseSettings):
    """Where the log lives and how topics are laid out."""

    model_config = prefixed("PEERLOG_KAFKA_")

    bootstrap_servers: str = "127.0.0.1:9092"
    topic_prefix: str = "peerlog."
    partitions: int = Field(6, ge=1, description="partitions per log topic when created")
    replication_factor: int = Field(1, ge=1)
    producer_pool_size: int = Field(
        4, ge=1, description="transactional producers the API rotates through (one open txn each)"
    )
    append_group_max_events: int = Field(
        2_000,
        ge=1,
        description="the API stops adding queued writes to one transaction once it holds this many events",
    )
    transaction_timeout_ms: int = 60_000
    append_timeout_s: float = Field(
        30.0, gt=0, description="how long a write waits for the log to commit it before it fails UNAVAILABLE"
    )
