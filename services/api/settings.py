"""Settings of the gRPC front door (`PEERLOG_API_`) and of who may call it (`PEERLOG_AUTH_`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings

from services.settings_base import prefixed


class ApiSettings(BaseSettings):
    """The gRPC front door."""

    model_config = prefixed("PEERLOG_API_")

    host: str = "127.0.0.1"
    port: int = Field(50051, ge=0, le=65535, description="port the API listens on (0: any free one)")
    consistency_wait_s: float = Field(
        10.0, gt=0, description="longest a read waits for the projections to reach a consistency token"
    )
    write_backlog_records: int = Field(
        1_000,
        ge=0,
        description="a message write is acknowledged once the projector is at most this many records behind it "
        "on each partition it wrote (bounded staleness; 0: acknowledge at once)",
    )
    write_backlog_wait_s: float = Field(
        2.0, gt=0, description="longest a message write waits for a projector that is further behind"
    )
    instance_id: str = Field(
        "",
        pattern=r"^[A-Za-z0-9._-]*$",
        description="this API server's name among the deployment's, kept across its restarts (a StatefulSet "
        "pod's name, a systemd unit's instance): started again after a crash, its log producers abort the "
        "writes the dead process left uncommitted at once, where under new ids those held up the projector on "
        "their partitions until the broker aborted them (transaction.timeout.ms). With several processes each "
        "takes it with its number appended. Two live servers must never share one",
    )
    metrics_port: int = Field(0, ge=0, le=65535, description="serve Prometheus metrics on this port (0: off)")
    metrics_host: str = Field(
        "127.0.0.1",
        description="address the metrics endpoint binds: loopback unless "
        "set otherwise, whatever `host` is (the metrics carry no authentication)",
    )
    tls_cert: Path | None = Field(None, description="PEM certificate chain: with tls_key, serve TLS only")
    tls_key: Path | None = Field(None, description="PEM private key of tls_cert")
    tls_client_ca: Path | None = Field(
        None,
        description="PEM CA bundle: clients must present a certificate it "
        "signed (mutual TLS); needs tls_cert and tls_key",
    )
    max_subscriptions: int = Field(
        100,
        ge=1,
        description="Subscribe streams one server process serves at once (each holds a Kafka consumer and "
        "a thread); one more is RESOURCE_EXHAUSTED",
    )
    max_subscriptions_per_workspace: int = Field(
        10,
        ge=1,
        description="Subscribe streams of one workspace one server process serves at once, so one tenant's "
        "streams cannot take all of max_subscriptions; one more is RESOURCE_EXHAUSTED",
    )
    uploads_per_workspace: int = Field(
        2,
        ge=1,
        description="UploadFile calls of one workspace one server process reads or holds to read at once (each "
        "holds its file, up to 32 MiB), so one tenant's slow PDFs cannot fill the queue; one more is "
        "RESOURCE_EXHAUSTED",
    )
    uploads_queued: int = Field(
        8,
        ge=1,
        description="UploadFile calls one server process reads or holds to read at once on each of its two "
        "readers (PDFs; text and JSON), each reading one file at a time; one more is RESOURCE_EXHAUSTED",
    )
    chats_per_workspace: int = Field(
        16,
        ge=1,
        description="Chat and ChatStream calls of one workspace one server process runs at once (each makes "
        "model calls for seconds, on the server's one model account), so one tenant cannot take every other's "
        "share of the model; one more is RESOURCE_EXHAUSTED",
    )
    max_concurrent_rpcs: int = Field(
        1_000,
        ge=1,
        description="calls one server process serves at once, Subscribe streams included (each may hold a "
        "request of up to 50 MB); one more is RESOURCE_EXHAUSTED",
    )
    max_streams_per_connection: int = Field(
        100,
        ge=1,
        description="calls one client connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); "
        "a client's further calls wait for one to end",
    )
    processes: int = Field(
        1,
        ge=1,
        le=64,
        description="server processes sharing the port (SO_REUSEPORT; the kernel "
        "spreads connections over them): one Python process uses about one core, so set it to "
        "the cores the API may use. Above 1 the port must be fixed, and the supervising process "
        "serves the metrics of all of them summed",
    )
    event_loop: Literal["uvloop", "asyncio"] = Field(
        "uvloop",
        description="the server's event loop: uvloop (libuv) costs less CPU per call than asyncio's own",
    )
    health_interval_s: float = Field(
        5.0,
        gt=0,
        description="seconds between checks of Kafka and Postgres; the "
        "health service says NOT_SERVING while either does not answer",
    )
    cursor_key: SecretStr = Field(
        SecretStr(""),
        description="key that signs page tokens, so a token only works "
        "for the list that issued it; empty: a random key per start (tokens then "
        "do not survive a restart). Set it when several API hosts serve one deployment",
    )

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

    model_config = prefixed("PEERLOG_AUTH_", populate_by_name=True)

    # PEERLOG_AUTH=on|off; off only when said so, and the server warns about it at start
    enabled: bool = Field(
        True, validation_alias="PEERLOG_AUTH", description="check tokens on every call but health and reflection"
    )
    algorithm: Algorithm = Field(
        "HS256", description="HS256 verifies with `secret`; RS256 and ES256 with `public_key_file`"
    )
    secret: SecretStr = Field(
        SecretStr(""), description="HS256 key (at least 32 bytes), shared by the server and `peerlog keys create`"
    )
    public_key_file: Path | None = Field(None, description="PEM public key that verifies RS256/ES256 tokens")
    private_key_file: Path | None = Field(
        None,
        description="PEM private key `peerlog keys create` signs RS256/ES256 tokens with; the server never needs it",
    )
    token: SecretStr = Field(
        SecretStr(""),
        description="the token this installation's own clients send "
        "(the CLI's audit and derivations commands, the benches)",
    )
    tls_ca: Path | None = Field(
        None,
        description="PEM CA certificate(s): set, the CLI's own calls (audit, derivations compare) reach the API "
        "over TLS, verifying its certificate with them (an API serving PEERLOG_API_TLS_CERT takes no other)",
    )
    leeway_s: float = Field(
        60.0,
        ge=0,
        le=3600,
        description="seconds a token's iat, nbf and exp may be off by, for clocks that disagree: a token made "
        "on a machine whose clock is a little ahead is not refused as not yet valid",
    )

    @model_validator(mode="after")
    def _key_matches_algorithm(self) -> "AuthSettings":
        if self.algorithm != "HS256" and self.secret.get_secret_value():
            raise ValueError(
                f"PEERLOG_AUTH_SECRET is for HS256; {self.algorithm} verifies with PEERLOG_AUTH_PUBLIC_KEY_FILE"
            )
        return self
