"""Shared fixtures: one real broker and Postgres per test run, isolated topics and schema per test."""

from __future__ import annotations

import concurrent.futures
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

# before grpc is first imported: with its fork handlers on, grpcio 1.81+ can crash a child of a process
# with live channels between fork and exec ("epoll_wait error: Bad file descriptor", grpc issue 43055;
# seen once killing the chaos bench's `pg_ctl start`). Tests start workers and servers as subprocesses
# while channels are open, and no child here uses gRPC inherited through a fork
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc
import pytest
from confluent_kafka import KafkaException

from projections.db import create_schema, sync_engine
from projections.settings import DatabaseSettings, ProjectorSettings
from services.api.settings import ApiSettings
from services.bus.admin import admin_client, create_topics
from services.bus.settings import KafkaSettings
from services.bus.topics import ALL_TOPICS
from services.settings import Settings
from tests.support.auth import AUTH, admin_channel, admin_token
from tests.support.infra import Infra, test_infra
from tests.support.running_projector import RunningProjector


@pytest.fixture(scope="session")
def infra() -> Iterator[Infra]:
    # not under pytest's tmp dir: as root, a later pytest run resets its permissions under a
    # running Postgres (which runs as an unprivileged user) and the server dies
    with tempfile.TemporaryDirectory(prefix="peerlog-test-") as root, test_infra(Path(root)) as running:
        yield running


def make_settings(infra: Infra, name: str | None = None) -> Settings:
    """Settings with their own topic prefix and schema, so tests never see each other's data."""
    name = name or uuid.uuid4().hex[:10]
    return Settings(
        kafka=KafkaSettings(
            bootstrap_servers=infra.bootstrap_servers,
            topic_prefix=f"t{name}.",
            partitions=3,
            producer_pool_size=2,
        ),
        database=DatabaseSettings(url=infra.database_url, schema_name=f"t{name}", pool_size=5),
        projector=ProjectorSettings(group_id=f"projector-{name}", poll_timeout_s=0.02),
        api=ApiSettings(port=0, consistency_wait_s=15.0),
        auth=AUTH,
    )


@pytest.fixture
def settings(infra: Infra) -> Iterator[Settings]:
    s = make_settings(infra)
    create_topics(s.kafka)
    yield s
    drop_topics(s.kafka)


def drop_topics(kafka: KafkaSettings) -> None:
    """Delete a finished test's topics. Without this the one broker ended a run holding some 12,000
    partitions, and every test that restarts it waited a minute or more for it to load them all."""
    admin = admin_client(kafka)
    names = {spec.full_name(kafka.topic_prefix) for spec in ALL_TOPICS}
    try:  # and what its processors made: each runner's changelog, Faust's tables and repartitions
        names |= {t for t in admin.list_topics(timeout=10).topics if t.startswith(kafka.topic_prefix)}
    except KafkaException:
        pass
    futures = admin.delete_topics(sorted(names), operation_timeout=10).values()
    # one deadline for all: waited for one by one, a slow broker once held a test's teardown 120 s
    # (8 deletions timing out at 15 s each). Already gone, the broker down or slow: a test's cleanup
    # never fails the test
    concurrent.futures.wait(futures, timeout=15)


@pytest.fixture
def projector(settings: Settings) -> Iterator[RunningProjector]:
    # the projector creates the tables when its thread starts; creating them here first (idempotent)
    # means a test can query them at once instead of racing that thread
    engine = sync_engine(settings.database)
    create_schema(engine, settings.database.schema_name)
    engine.dispose()
    running = RunningProjector(settings)
    running.start()
    yield running
    running.stop()


@pytest.fixture
async def channel(settings: Settings, projector: RunningProjector) -> AsyncIterator[grpc.aio.Channel]:
    from services.api.server import start

    server = await start(settings)
    async with admin_channel(settings, server.port) as chan:
        # for tests that drive a command-line client
        chan.address, chan.token = f"127.0.0.1:{server.port}", admin_token(settings)
        yield chan
    await server.stop(0)


@pytest.fixture
def model_server():
    from tests.support.model_server import ModelServer

    with ModelServer() as server:
        yield server


@pytest.fixture
def start_worker(settings, tmp_path, model_server):
    """Start `peerlog worker` subprocesses against this test's topics, schema and model server."""
    from tests.support.processes import Worker

    started: list[Worker] = []

    def start(processors: str = "router,deriver,summarizer,embedder", **env: str) -> Worker:
        base = {
            "PEERLOG_WORKER_PROCESSORS": processors,
            "PEERLOG_LLM_BASE_URL": model_server.base_url,
            "PEERLOG_LLM_MODEL": "test-model",
            "PEERLOG_LLM_TIMEOUT_S": "5",
            "PEERLOG_LLM_MAX_RETRIES": "1",
            "PEERLOG_DERIVER_FLUSH": "true",
        }
        worker = Worker(settings, tmp_path / f"worker-{len(started)}.log", {**base, **env}).start()
        started.append(worker)
        worker.wait_for("worker running")  # its start-up outside the test's own waits
        return worker

    yield start
    for worker in started:
        worker.stop()
        text = worker.log_text()
        tail = text[-4000:]
        if "Traceback" in tail or "ERROR" in tail:
            print(f"--- worker log tail ---\n{tail}")
        stalled = text.rfind("Timeout (")  # services/worker/stalled_loop.py: where the event loop stopped
        if stalled >= 0:
            print(f"--- worker's event loop stalled; its threads ---\n{text[stalled : stalled + 12_000]}")
