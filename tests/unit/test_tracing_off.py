"""A caller's trace context goes no further than the API when tracing is off: not into the records a call
appends (which every processor carries on), nor into the JSON log lines."""

from __future__ import annotations

import logging

import orjson
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from services import tracing
from services.api.telemetry import _Call
from services.logs import JsonFormatter

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
METADATA = (("traceparent", f"00-{CALLER_TRACE}-b7ad6b7169203331-01"), ("tracestate", "vendor=" + "a" * 200))
METHOD = "/peerlog.v1.MessageService/AddMessages"


def _log_line() -> dict:
    record = logging.LogRecord("peerlog.test", logging.INFO, __file__, 1, "appended", None, None)
    return orjson.loads(JsonFormatter().format(record))


def test_with_tracing_off_no_header_is_written_for_a_callers_traceparent(monkeypatch: pytest.MonkeyPatch):
    # what the tracer is without `setup` (PEERLOG_TRACING_EXPORTER=off)
    monkeypatch.setattr(tracing, "TRACER", trace.NoOpTracerProvider().get_tracer("peerlog"))
    with _Call(METHOD, METADATA).current_span():
        headers, line = tracing.record_headers(), _log_line()
    assert headers == []
    assert "trace_id" not in line and "span_id" not in line


def test_with_tracing_on_a_sampled_out_call_still_passes_its_decision_on(monkeypatch: pytest.MonkeyPatch):
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0)))
    monkeypatch.setattr(tracing, "TRACER", provider.get_tracer("peerlog"))
    with _Call(METHOD, ()).current_span() as span:
        headers = tracing.record_headers()
    assert not span.is_recording()
    # the processors follow "not sampled" (flags 00) rather than start traces of their own
    carried = trace.get_current_span(tracing.context_from(headers)).get_span_context()
    assert carried.trace_id == span.get_span_context().trace_id and not carried.trace_flags.sampled


def test_with_tracing_on_a_callers_trace_is_continued_in_headers_and_log_lines(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tracing, "TRACER", TracerProvider().get_tracer("peerlog"))
    with _Call(METHOD, METADATA).current_span() as span:
        headers, line = dict(tracing.record_headers()), _log_line()
    assert headers["traceparent"].decode().split("-")[1] == CALLER_TRACE
    assert line["trace_id"] == CALLER_TRACE == trace.format_trace_id(span.get_span_context().trace_id)
    assert line["span_id"] == trace.format_span_id(span.get_span_context().span_id) != "b7ad6b7169203331"
