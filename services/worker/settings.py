"""Settings of the processor worker (`peerlog worker`, `PEERLOG_WORKER_`)."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings

from services.settings_base import prefixed

# every processor a worker can run, and the module whose `build` makes it (imported only when it runs)
PROCESSORS = {
    "router": "services.router.agent",
    "deriver": "services.deriver.agent",
    "summarizer": "services.summarizer.agent",
    "dream-scheduler": "services.dreamer.scheduler_agent",
    "dreamer": "services.dreamer.agent",
    "embedder": "services.embedder.agent",
}


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
    instance_id: str = Field(
        "",
        pattern=r"^[A-Za-z0-9._-]*$",
        description="this worker's name among the deployment's workers, kept across its restarts (a "
        "StatefulSet pod's name, a systemd unit's instance): started again after a crash, it aborts the "
        "transactions the dead process left open and takes its partitions back at once; empty: a new "
        "identity at each start, and a killed worker's partitions wait until the broker aborts its "
        "transactions (transaction.timeout.ms). Two live workers must never share one",
    )
    metrics_port: int = Field(
        0, ge=0, le=65535, description="serve Prometheus metrics (model calls, transactions) on this port (0: off)"
    )
    metrics_host: str = Field("127.0.0.1", description="address the metrics endpoint binds (no authentication)")
    stall_report_s: float = Field(
        60.0,
        ge=0,
        description="when the worker's event loop has not run for this long (a call stuck holding the "
        "interpreter lock), write every thread's stack to stderr, again as often while it lasts (0: off)",
    )

    @field_validator("processors")
    @classmethod
    def _known_processors(cls, value: str) -> str:
        # refused at start: a misspelt name ended the worker with a traceback once it had reached Kafka
        names = _names(value)
        unknown = [name for name in names if name not in PROCESSORS]
        if unknown or not names:
            said = f"unknown processor {unknown[0]!r}" if unknown else "no processor named"
            raise ValueError(f"{said}; choose from {', '.join(PROCESSORS)}")
        return value

    def app_id_for(self, topic_prefix: str) -> str:
        return self.app_id or f"{topic_prefix}processors"

    def member(self, number: int) -> str:
        """The group member name of this worker's `number`th runner of a processor (empty: dynamic)."""
        return f"{self.instance_id}.{number}" if self.instance_id else ""

    def processor_names(self) -> list[str]:
        return _names(self.processors)


def _names(processors: str) -> list[str]:
    return [p.strip() for p in processors.split(",") if p.strip()]
