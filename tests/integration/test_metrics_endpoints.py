"""Each process serves Prometheus metrics on its own port: scraped from a real API, projector and worker."""

from __future__ import annotations

import urllib.request

import grpc
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from infra.postgres.embedded import free_port
from infra.stack import wait_for_api
from peerlog.v1 import workspaces_pb2
from services.bus.topics import ALL_TOPICS
from tests.support.auth import admin_channel
from tests.support.client import Client
from tests.support.extractor import extract_each_turn
from tests.support.processes import Worker
from tests.support.wait import eventually

ADD = "/peerlog.v1.MessageService/AddMessages"


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels): value} from a /metrics endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name: str, **labels) -> float | None:
    return samples.get((name, frozenset(labels.items())))


@pytest.fixture
def stack(settings, tmp_path, start_worker):
    """Projector, API and worker as the real processes, each with its metrics port; logs as JSON."""
    ports = {name: free_port() for name in ("projector", "api", "api_metrics", "worker")}
    json_logs = {"PEERLOG_LOG_FORMAT": "json"}
    started = [
        Worker(settings, tmp_path / "projector.log", {**json_logs,
               "PEERLOG_PROJECTOR_METRICS_PORT": str(ports["projector"])}, command="projector run").start(),
        Worker(settings, tmp_path / "api.log", {**json_logs, "PEERLOG_API_PORT": str(ports["api"]),
               "PEERLOG_API_METRICS_PORT": str(ports["api_metrics"])}, command="serve").start(),
    ]
    started.append(start_worker("router,deriver", PEERLOG_WORKER_METRICS_PORT=str(ports["worker"]), **json_logs))
    try:
        wait_for_api(ports["api"], timeout=60)
        yield ports, started
    finally:
        for process in started[:2]:
            process.stop()


async def test_api_projector_and_worker_serve_their_metrics(settings, model_server, stack):
    ports, processes = stack
    model_server.reply_with(extract_each_turn)
    async with admin_channel(settings, ports["api"]) as chan:
        c = Client(chan)
        await c.setup_conversation("w", "s")
        await c.add("w", "s", [("alice", "I adopted a cat named Miso")])
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['api']}") as anonymous:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await Client(anonymous).workspaces.GetOrCreateWorkspace(
                workspaces_pb2.GetOrCreateWorkspaceRequest(workspace_id="w"))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED

    api = scrape(ports["api_metrics"])
    assert value(api, "peerlog_rpc_requests_total", method=ADD, code="OK") == 1
    assert value(api, "peerlog_rpc_duration_seconds_count", method=ADD, code="OK") == 1
    assert value(api, "peerlog_rpc_requests_total", method="/peerlog.v1.WorkspaceService/GetOrCreateWorkspace",
                 code="UNAUTHENTICATED") == 1
    assert value(api, "peerlog_kafka_transactions_committed_total", component="peerlog-api") >= 1
    assert value(api, "peerlog_kafka_transaction_aborts_total", component="peerlog-api", reason="log") == 0

    def derived():
        worker = scrape(ports["worker"])
        return worker if (value(worker, "peerlog_llm_calls_total", stage="deriver", outcome="ok") or 0) >= 1 else None

    worker = eventually(derived, 60, every=0.5)
    assert value(worker, "peerlog_llm_tokens_total", stage="deriver", kind="prompt") > 0
    assert value(worker, "peerlog_kafka_transactions_committed_total", component="router") >= 1
    assert value(worker, "peerlog_processor_events_total", processor="router") >= 1
    assert value(worker, "peerlog_kafka_transaction_aborts_total", component="deriver", reason="processor") == 0

    def projected():
        projector = scrape(ports["projector"])
        done = value(projector, "peerlog_derivation_batches", state="done")
        return projector if done and value(projector, "peerlog_projector_lag_records",
                                           topic=f"{settings.kafka.topic_prefix}sessions") == 0 else None

    projector = eventually(projected, 60, every=0.5)
    assert value(projector, "peerlog_derivation_batches", state="in_flight") == 0
    assert value(projector, "peerlog_derivations_pending_messages") == 0
    assert value(projector, "peerlog_dreams", state="completed") == 0
    assert value(projector, "peerlog_dead_letters", kind="derivation") == 0
    for topic in ALL_TOPICS:
        name = topic.full_name(settings.kafka.topic_prefix)
        assert value(projector, "peerlog_projector_lag_records", topic=name) is not None
        assert value(projector, "peerlog_projector_lag_seconds", topic=name) is not None

    # PEERLOG_LOG_FORMAT=json: each process logs one JSON object a line
    for process, phrase in zip(processes, ("projector assigned", "peerlog API listening", "worker running")):
        lines = [orjson.loads(line) for line in process.log_text().splitlines() if line.startswith("{")]
        assert any(phrase in line["message"] and line["level"] == "INFO" for line in lines), process.log_text()
