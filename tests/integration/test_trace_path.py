"""One message's path as one trace: the AddMessages call, the router and deriver handling it, the model call."""

from __future__ import annotations

import asyncio
import time

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.cli.client import Client
from services.deriver.settings import DeriverSettings
from services.llm.settings import LlmSettings
from services.worker.app import build_runners
from services.worker.settings import WorkerSettings
from tests.integration.test_chat import call, memory, serve, stream  # noqa: F401 (memory, serve: fixtures)
from tests.support.extractor import extract_each_turn
from tests.support.model_server import Reply


@pytest.fixture(scope="module")
def spans():
    """Every span this process finishes while the module runs (the global provider can be set only once)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    yield exporter
    exporter.shutdown()  # later modules' spans are dropped, not kept in memory


@pytest.fixture
async def processors(settings, model_server):
    """The router and one deriver, in this process (so their spans reach the in-memory exporter)."""
    own = settings.model_copy(
        update={
            "llm": LlmSettings(base_url=model_server.base_url, model="test-model", timeout_s=5, max_retries=1),
            "deriver": DeriverSettings(flush=True),
            "worker": WorkerSettings(processors="router,deriver", deriver_instances=1),
        }
    )
    runners = build_runners(own)
    tasks = [asyncio.create_task(r.run()) for r in runners]
    yield
    for r in runners:
        r.stop()
    await asyncio.gather(*tasks, return_exceptions=True)


def _path_to_root(exporter: InMemorySpanExporter, name: str) -> list:
    """The finished span `name` and its finished ancestors, root first; [] until the chain is complete."""
    finished = {s.context.span_id: s for s in exporter.get_finished_spans()}
    path = [s for s in finished.values() if s.name == name][:1]
    while path and path[-1].parent is not None:
        if path[-1].parent.span_id not in finished:
            return []  # an ancestor (the handling that made the call) has not ended yet
        path.append(finished[path[-1].parent.span_id])
    return path[::-1]


async def _eventually_path(exporter: InMemorySpanExporter, name: str, timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout
    while not (path := _path_to_root(exporter, name)):
        assert time.monotonic() < deadline, f"no complete trace ending in {name} within {timeout} s"
        await asyncio.sleep(0.2)
    return path


async def test_one_trace_links_the_call_the_processors_and_the_model_call(spans, channel, processors, model_server):
    model_server.reply_with(extract_each_turn)
    c = Client(channel)
    await c.setup_conversation("w", "s")
    spans.clear()
    await c.add("w", "s", [("alice", "I adopted a cat named Miso")])

    path = await _eventually_path(spans, "model deriver")
    assert [s.name for s in path] == [
        "peerlog.v1.MessageService/AddMessages",
        "router MessageAppended",
        "deriver MessagePerceived",
        "model deriver",
    ]
    assert len({s.context.trace_id for s in path}) == 1
    call, routed, derived, model = path
    assert call.kind == trace.SpanKind.SERVER and call.attributes["rpc.grpc.status_code"] == 0
    assert routed.parent.is_remote and derived.parent.is_remote  # crossed the log in record headers
    assert model.kind == trace.SpanKind.CLIENT and model.attributes["gen_ai.usage.input_tokens"] > 0


async def test_a_streamed_chat_traces_each_model_call_under_the_call(spans, memory, model_server):
    model_server.script([Reply(tool_calls=[call("search_messages", query="Oslo")])])
    model_server.reply_with(lambda req: Reply(content="Bob moved to Oslo"))
    spans.clear()
    chunks = [chunk async for chunk in stream(memory["chan"])]
    assert chunks[-1].WhichOneof("event") == "done"

    (chat,) = [s for s in spans.get_finished_spans() if s.name == "peerlog.v1.DialecticService/ChatStream"]
    models = [s for s in spans.get_finished_spans() if s.name.startswith("model dialectic_")]
    assert len(models) == 2  # the tool round and the streamed answer
    assert all(s.parent.span_id == chat.context.span_id for s in models)
