"""Settings of the Postgres that holds the projections (`PEERLOG_DATABASE_`) and of the projector
(`PEERLOG_PROJECTOR_`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings
from sqlalchemy import make_url

from services.settings_base import prefixed


class DatabaseSettings(BaseSettings):
    """The Postgres (with pgvector) that holds the projections."""

    model_config = prefixed("PEERLOG_DATABASE_")

    url: str = "postgresql+psycopg://peerlog@127.0.0.1:5432/peerlog"
    schema_name: str = Field("peerlog", description="schema that reads are served from")
    # SQLAlchemy reads a pool size of 0 or less as "no limit": refused, not a connection per call
    pool_size: int = Field(10, ge=1, description="the API's connections kept open per process")

    def connect_args(self) -> dict[str, str]:
        """psycopg's connection arguments: every session in UTC, beside any `options` the URL gives. In the
        server's own zone, a timestamp of 1 January of year 1 read west of UTC is before year 1, which
        psycopg refuses, and every read of its row failed."""
        given = make_url(self.url).query.get("options", "")
        given = given if isinstance(given, str) else " ".join(given)
        return {"options": f"{given} -c TimeZone=UTC".strip()}  # the last setting of a name wins

    def engine_args(self) -> dict[str, Any]:
        """SQLAlchemy's engine arguments for every engine on this database: `connect_args`, and statements'
        parameters kept out of error texts. They hold the caller's words (a search query, a message), and
        an error's text reaches the operator's log."""
        return {"connect_args": self.connect_args(), "hide_parameters": True}


class ProjectorSettings(BaseSettings):
    """How the projector batches the log into Postgres."""

    model_config = prefixed("PEERLOG_PROJECTOR_")

    group_id: str = "peerlog-projector"
    max_batch: int = Field(2000, ge=1, description="events applied per transaction, at most")
    # 0 polled in a busy loop; a negative timeout waited for events forever, deaf to SIGTERM
    poll_timeout_s: float = Field(0.05, gt=0, description="how long one poll of the log waits for events")
    instance_id: str = Field(
        "",
        description="static membership in the consumer group (each projector process its own id): a projector "
        "started again under the same id takes its partitions back at once, instead of after the session timeout "
        "of the one that died; empty: dynamic membership",
    )
    session_timeout_s: float = Field(
        10.0,
        ge=6,
        le=300,
        description="how long the group waits for a projector that stopped answering before giving its "
        "partitions to another (or, with an instance_id, to itself started again)",
    )
    metrics_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="serve Prometheus metrics (lag per topic, derivations, dreams, dead letters) on this port (0: off)",
    )
    metrics_host: str = Field("127.0.0.1", description="address the metrics endpoint binds (no authentication)")
