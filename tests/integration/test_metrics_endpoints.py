"""Each process serves Prometheus metrics on its own port: scraped from a real API, projector and worker,
which also log JSON and export their spans over OTLP to a collector stand-in."""

from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import orjson
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from infra.processes import free_port
from infra.stack import wait_for_api
from peerlog.v1 import workspaces_pb2
from services.bus.topics import ALL_TOPICS
from services.cli.client import Client
from tests.support.auth import admin_channel
from tests.support.extractor import extract_each_turn
from tests.support.processes import Worker
from tests.support.wait import eventually

ADD = "/peerlog.v1.MessageService/AddMessages"
REFUSED = "/peerlog.v1.WorkspaceService/GetOrCreateWorkspace"


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels): value} from a /metrics endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples, name: str, **labels) -> float | None:
    return samples.get((name, frozenset(labels.items())))


class Collector(ThreadingHTTPServer):
    """Accepts OTLP/HTTP trace exports and keeps their spans as (service, name, trace id, parent span id)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, bytes, bytes]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans:
                    service = next(
                        a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"
                    )
                    server.spans += [
                        (service, span.name, span.trace_id, span.parent_span_id)
                        for scope in resource_spans.scope_spans
                        for span in scope.spans
                    ]
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def collector():
    server = Collector()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


@pytest.fixture
def stack(settings, tmp_path, start_worker, collector):
    """Projector, API and worker as the real processes, each with its metrics port; JSON logs; OTLP traces."""
    ports = {name: free_port() for name in ("projector", "api", "api_metrics", "worker")}
    env = {
        "PEERLOG_LOG_FORMAT": "json",
        "PEERLOG_TRACING_EXPORTER": "otlp",
        "PEERLOG_TRACING_ENDPOINT": f"http://127.0.0.1:{collector.server_port}/v1/traces",
    }
    started = [
        Worker(
            settings,
            tmp_path / "projector.log",
            {**env, "PEERLOG_PROJECTOR_METRICS_PORT": str(ports["projector"])},
            command="projector run",
        ).start(),
        Worker(
            settings,
            tmp_path / "api.log",
            {**env, "PEERLOG_API_PORT": str(ports["api"]), "PEERLOG_API_METRICS_PORT": str(ports["api_metrics"])},
            command="serve",
        ).start(),
    ]
    started.append(start_worker("router,deriver", PEERLOG_WORKER_METRICS_PORT=str(ports["worker"]), **env))
    try:
        wait_for_api(ports["api"], timeout=180)
        yield ports, started
    finally:
        for process in started[:2]:
            process.stop()


async def test_api_projector_and_worker_serve_metrics_log_json_and_export_traces(
    settings, model_server, stack, collector
):
    ports, processes = stack
    model_server.reply_with(extract_each_turn)
    async with admin_channel(settings, ports["api"]) as chan:
        c = Client(chan)
        await c.setup_conversation("w", "s")
        await c.add("w", "s", [("alice", "I adopted a cat named Miso")])
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['api']}") as anonymous:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await Client(anonymous).workspaces.GetOrCreateWorkspace(
                workspaces_pb2.GetOrCreateWorkspaceRequest(workspace_id="w")
            )
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED

    def refusal_counted():
        # an aborted call's status reaches the client before the server's interceptor counts it
        api = scrape(ports["api_metrics"])
        return api if value(api, "peerlog_rpc_requests_total", method=REFUSED, code="UNAUTHENTICATED") else None

    api = eventually(refusal_counted, 10, every=0.1)
    assert value(api, "peerlog_rpc_requests_total", method=ADD, code="OK") == 1
    assert value(api, "peerlog_rpc_duration_seconds_count", method=ADD, code="OK") == 1
    assert value(api, "peerlog_rpc_requests_total", method=REFUSED, code="UNAUTHENTICATED") == 1
    assert value(api, "peerlog_kafka_transactions_committed_total", component="peerlog-api") >= 1
    assert value(api, "peerlog_kafka_transaction_aborts_total", component="peerlog-api") == 0

    def derived():
        worker = scrape(ports["worker"])
        return worker if (value(worker, "peerlog_llm_calls_total", stage="deriver", outcome="ok") or 0) >= 1 else None

    worker = eventually(derived, 60, every=0.5)
    assert value(worker, "peerlog_llm_tokens_total", stage="deriver", kind="prompt") > 0
    assert value(worker, "peerlog_kafka_transactions_committed_total", component="router") >= 1
    assert value(worker, "peerlog_processor_events_total", processor="router") >= 1
    assert value(worker, "peerlog_kafka_transaction_aborts_total", component="deriver") == 0

    def projected():
        projector = scrape(ports["projector"])
        done = value(projector, "peerlog_derivation_batches", state="done")
        return (
            projector
            if done
            and value(projector, "peerlog_projector_lag_records", topic=f"{settings.kafka.topic_prefix}sessions") == 0
            else None
        )

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

    # PEERLOG_TRACING_EXPORTER=otlp: the API's call and the worker's handling of its records share a trace
    def worker_spans_in_the_calls_trace():
        calls = {
            trace_id
            for service, name, trace_id, _ in collector.spans
            if service == "peerlog-api" and name == ADD.lstrip("/")
        }
        names = {
            name
            for service, name, trace_id, parent in collector.spans
            if service == "peerlog-worker" and trace_id in calls and parent
        }
        return names >= {"router MessageAppended", "deriver MessagePerceived", "model deriver"}

    eventually(worker_spans_in_the_calls_trace, 30, every=0.5)
