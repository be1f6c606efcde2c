"""Settings of the shared infrastructure (the log, the database, the projector, the API) and of Chat.

Each component has its own small class with its own env prefix (`PEERLOG_KAFKA_`, …); processors keep
theirs in their own package; `services.settings.Settings` composes them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from pydantic import Field, SecretStr, model_validator
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
    metrics_port: int = Field(0, ge=0, description="serve Prometheus metrics (lag per topic, derivations, dreams, "
                              "dead letters) on this port (0: off)")
    metrics_host: str = Field("127.0.0.1", description="address the metrics endpoint binds (no authentication)")


class ApiSettings(BaseSettings):
    """The gRPC front door."""

    model_config = _prefixed("PEERLOG_API_")

    host: str = "127.0.0.1"
    port: int = 50051
    consistency_wait_s: float = Field(
        10.0, description="longest a read waits for the projections to reach a consistency token"
    )
    metrics_port: int = Field(0, ge=0, description="serve Prometheus metrics on this port (0: off)")
    metrics_host: str = Field("127.0.0.1", description="address the metrics endpoint binds: loopback unless "
                              "set otherwise, whatever `host` is (the metrics carry no authentication)")
    tls_cert: Path | None = Field(None, description="PEM certificate chain: with tls_key, serve TLS only")
    tls_key: Path | None = Field(None, description="PEM private key of tls_cert")
    tls_client_ca: Path | None = Field(None, description="PEM CA bundle: clients must present a certificate it "
                                       "signed (mutual TLS); needs tls_cert and tls_key")
    processes: int = Field(1, ge=1, le=64, description="server processes sharing the port (SO_REUSEPORT; the kernel "
                           "spreads connections over them): one Python process uses about one core, so set it to "
                           "the cores the API may use. Above 1 the port must be fixed, and the supervising process "
                           "serves the metrics of all of them summed")
    health_interval_s: float = Field(5.0, gt=0, description="seconds between checks of Kafka and Postgres; the "
                                     "health service says NOT_SERVING while either does not answer")
    cursor_key: SecretStr = Field(SecretStr(""), description="key that signs page tokens, so a token only works "
                                  "for the list that issued it; empty: a random key per start (tokens then "
                                  "do not survive a restart). Set it when several API hosts serve one deployment")


    @model_validator(mode="after")
    def _tls_complete(self) -> "ApiSettings":
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("PEERLOG_API_TLS_CERT and PEERLOG_API_TLS_KEY go together: set both or neither")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("PEERLOG_API_TLS_CLIENT_CA (mutual TLS) needs PEERLOG_API_TLS_CERT and _KEY")
        return self


Algorithm = Literal["HS256", "RS256", "ES256"]


class AuthSettings(BaseSettings):
    """Who may call the API: scoped JWTs (services/api/tokens.py), checked by services/api/auth.py."""

    model_config = SettingsConfigDict(env_prefix="PEERLOG_AUTH_", extra="ignore", frozen=True,
                                      populate_by_name=True)

    # PEERLOG_AUTH=on|off; off only when said so, and the server warns about it at start
    enabled: bool = Field(True, validation_alias="PEERLOG_AUTH", description="check tokens on every call "
                          "but health and reflection")
    algorithm: Algorithm = Field("HS256", description="HS256 verifies with `secret`; RS256 and ES256 with "
                                 "`public_key_file`")
    secret: SecretStr = Field(SecretStr(""), description="HS256 key (at least 32 bytes), shared by the server "
                              "and `peerlog keys create`")
    public_key_file: Path | None = Field(None, description="PEM public key that verifies RS256/ES256 tokens")
    private_key_file: Path | None = Field(None, description="PEM private key `peerlog keys create` signs "
                                          "RS256/ES256 tokens with; the server never needs it")
    token: SecretStr = Field(SecretStr(""), description="the token this installation's own clients send "
                             "(the CLI's audit and derivations commands, the benches)")

    @model_validator(mode="after")
    def _key_matches_algorithm(self) -> "AuthSettings":
        if self.algorithm != "HS256" and self.secret.get_secret_value():
            raise ValueError(f"PEERLOG_AUTH_SECRET is for HS256; {self.algorithm} verifies with "
                             "PEERLOG_AUTH_PUBLIC_KEY_FILE")
        return self


class WorkerSettings(BaseSettings):
    """The processor worker (`peerlog worker`)."""

    model_config = _prefixed("PEERLOG_WORKER_")

    app_id: str = Field("", description="consumer-group and changelog prefix; empty: '<topic prefix>processors', "
                        "so two deployments on one cluster never share state")
    processors: str = Field("router,deriver,summarizer,embedder,dream-scheduler,dreamer",
                            description="comma-separated processors this worker runs")
    deriver_instances: int = Field(4, ge=1, description="deriver group members in this worker: model calls of "
                                   "different partitions overlap, each in its own transaction")
    metrics_port: int = Field(0, ge=0, description="serve Prometheus metrics (model calls, transactions) on this "
                              "port (0: off)")
    metrics_host: str = Field("127.0.0.1", description="address the metrics endpoint binds (no authentication)")

    def app_id_for(self, topic_prefix: str) -> str:
        return self.app_id or f"{topic_prefix}processors"

    def processor_names(self) -> list[str]:
        return [p.strip() for p in self.processors.split(",") if p.strip()]


class LogSettings(BaseSettings):
    """How every process logs (services/logs.py)."""

    model_config = _prefixed("PEERLOG_LOG_")

    format: Literal["text", "json"] = Field("text", description="json: one object a line, with the trace and "
                                             "span ids of the call or event being handled")
    level: str = "INFO"


class TracingSettings(BaseSettings):
    """OpenTelemetry traces (services/tracing.py): off unless an exporter is chosen."""

    model_config = _prefixed("PEERLOG_TRACING_")

    exporter: Literal["off", "otlp"] = Field("off", description="otlp: export spans over OTLP/HTTP")
    endpoint: str = Field("", description="OTLP/HTTP traces URL (e.g. http://127.0.0.1:4318/v1/traces); "
                          "empty: the exporter's default or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    sample_ratio: float = Field(1.0, ge=0, le=1, description="share of new traces recorded (a propagated "
                                "trace follows its parent's decision)")


Level = Literal["minimal", "low", "medium", "high", "max"]
LEVELS: tuple[str, ...] = get_args(Level)
SEARCH_TOOLS = ("search_observations", "search_messages")


@dataclass(frozen=True)
class LevelPolicy:
    """What one reasoning level may do: its model stage, tools, tool-round cap and prefetch size."""

    level: str
    stage: str
    tool_rounds: int
    prefetch: int  # per kind: this many explicit and this many derived observations
    search_only: bool  # only SEARCH_TOOLS


class DialecticSettings(BaseSettings):
    """Chat's levels and limits. Here rather than in services/dialectic: services.settings, which the
    projector reads, may not import a layer above projections. Each level's model is LLM stage dialectic_<level>."""

    model_config = _prefixed("PEERLOG_DIALECTIC_")

    # the reference system's defaults: low really does get more rounds than medium
    rounds_minimal: int = Field(1, ge=0, description="most tool rounds at level minimal")
    rounds_low: int = Field(5, ge=0)
    rounds_medium: int = Field(2, ge=0)
    rounds_high: int = Field(4, ge=0)
    rounds_max: int = Field(10, ge=0)
    prefetch_minimal: int = Field(10, ge=0, description="explicit and derived observations prefetched, each")
    prefetch: int = Field(25, ge=0, description="the same for every other level")
    history_tokens: int = Field(2000, ge=0, description="most tokens of recent session history in the prompt")
    deadline_s: float = Field(120.0, gt=0, description="hard limit per call (a shorter gRPC deadline wins)")
    token_budget: int = Field(
        32_000, ge=1000, description="most prompt tokens per call, summed over model calls; tools stop first"
    )
    tool_result_limit: int = Field(20, ge=1, le=100, description="most rows one tool call returns")
    tool_result_chars: int = Field(6000, ge=500, description="longest tool result shown to the model")

    def level(self, name: str) -> LevelPolicy:
        """The policy of a level (one of LEVELS)."""
        if name not in LEVELS:
            raise ValueError(f"unknown reasoning level {name!r}; expected one of {', '.join(LEVELS)}")
        prefetch = self.prefetch_minimal if name == "minimal" else self.prefetch
        return LevelPolicy(name, f"dialectic_{name}", getattr(self, f"rounds_{name}"), prefetch, name == "minimal")


class DreamSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PEERLOG_DREAM_", extra="ignore", frozen=True)

    threshold: int = Field(50, ge=1, description="new explicit observations since the last dream that make one due")
    cooldown_s: float = Field(8 * 3600, ge=0, description="least time between the end of one dream and the next")
    idle_s: float = Field(3600, ge=0, description="how long the observed peer must have been quiet first")
    tick_s: float = Field(60.0, gt=0, description="how often the clock re-checks pairs that wait")
    deduction_rounds: int = Field(12, ge=1, description="tool-round cap of the deduction specialist")
    induction_rounds: int = Field(10, ge=1, description="tool-round cap of the induction specialist")
    max_dream_s: float = Field(900.0, gt=0, description="a dream's whole time budget; one still running then "
                               "ends as failed, keeping what it wrote (the worker's poll interval is sized to it)")
