"""Settings of the log (`PEERLOG_KAFKA_`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings

from services.settings_base import prefixed

PREFIX = "PEERLOG_KAFKA_"
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})


class KafkaSettings(BaseSettings):
    """Where the log lives, how topics are laid out, and how clients prove who they are to the broker."""

    model_config = prefixed(PREFIX)

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
    # librdkafka's range for transaction.timeout.ms: a value outside it failed at the first client, with a
    # traceback; the broker refuses more than its transaction.max.timeout.ms (15 minutes unless raised)
    transaction_timeout_ms: int = Field(60_000, ge=1_000, le=2**31 - 1)
    append_timeout_s: float = Field(
        30.0, gt=0, description="how long a write waits for the log to commit it before it fails UNAVAILABLE"
    )
    security_protocol: SecurityProtocol = Field(
        "PLAINTEXT", description="how clients reach the broker: SASL_* authenticate, SSL and SASL_SSL encrypt"
    )
    sasl_mechanism: SaslMechanism | None = Field(None, description="needed with SASL_PLAINTEXT and SASL_SSL")
    sasl_username: str = ""
    sasl_password: SecretStr = SecretStr("")
    ssl_ca_location: Path | None = Field(None, description="PEM CA certificate(s) that verify the broker")
    ssl_certificate_location: Path | None = Field(None, description="PEM client certificate (mutual TLS)")
    ssl_key_location: Path | None = Field(None, description="PEM private key of ssl_certificate_location")

    @model_validator(mode="after")
    def _security_complete(self) -> "KafkaSettings":
        # a half-configured client would reach the broker unauthenticated or not at all: refuse at start
        problems = [*self._sasl_problems(), *self._tls_problems()]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _sasl_problems(self) -> list[str]:
        given = {
            "sasl_mechanism": self.sasl_mechanism,
            "sasl_username": self.sasl_username,
            "sasl_password": self.sasl_password.get_secret_value(),
        }
        protocol = f"{_env('security_protocol')}={self.security_protocol}"
        if self.security_protocol in SASL_PROTOCOLS:
            return [f"{protocol} needs {_env(name)}" for name, value in given.items() if not value]
        # credentials that are never sent leave the operator believing the log is protected
        return [f"{_env(name)} is set but {protocol} uses no SASL" for name, value in given.items() if value]

    def _tls_problems(self) -> list[str]:
        files = self._tls_files()
        protocol = f"{_env('security_protocol')}={self.security_protocol}"
        if self.security_protocol not in TLS_PROTOCOLS:
            return [f"{_env(name)} is set but {protocol} uses no TLS" for name in files]
        problems = [f"{_env(name)}={path} is not a file" for name, path in files.items() if not path.is_file()]
        if ("ssl_certificate_location" in files) != ("ssl_key_location" in files):
            problems.append(f"{_env('ssl_certificate_location')} and {_env('ssl_key_location')} go together")
        return problems

    def _tls_files(self) -> dict[str, Path]:
        named = {
            "ssl_ca_location": self.ssl_ca_location,
            "ssl_certificate_location": self.ssl_certificate_location,
            "ssl_key_location": self.ssl_key_location,
        }
        return {name: path for name, path in named.items() if path is not None}

    def client_config(self) -> dict[str, str]:
        """The librdkafka properties every Producer, Consumer and AdminClient of the log starts from: where
        the brokers are and the credentials they ask for. Built only here, so no client can leave them out."""
        config = {"bootstrap.servers": self.bootstrap_servers, "security.protocol": self.security_protocol.lower()}
        if self.security_protocol in SASL_PROTOCOLS:
            config["sasl.mechanism"] = str(self.sasl_mechanism)
            config["sasl.username"] = self.sasl_username
            config["sasl.password"] = self.sasl_password.get_secret_value()
        # ssl_ca_location is librdkafka's ssl.ca.location, and so on
        config.update({name.replace("_", "."): str(path) for name, path in self._tls_files().items()})
        return config


def _env(field: str) -> str:
    return f"{PREFIX}{field.upper()}"
