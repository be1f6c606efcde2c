"""PEERLOG_LOG_FORMAT=json: one object a line, carrying the trace of the call or event being handled."""

from __future__ import annotations

import logging

import httpx
import orjson
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from services.logs import JsonFormatter, LogSettings, configure
from services.tracing import context_from, record_headers


def _line(message: str, *args, exc_info=None) -> dict:
    record = logging.LogRecord("peerlog.test", logging.WARNING, __file__, 1, message, args, exc_info)
    return orjson.loads(JsonFormatter().format(record))


def test_a_line_logged_inside_a_span_carries_its_trace_and_span_ids():
    with TracerProvider().get_tracer("t").start_as_current_span("handle") as span:
        line = _line("derived %d observations", 3)
    ids = span.get_span_context()
    assert line["message"] == "derived 3 observations" and line["level"] == "WARNING"
    assert line["logger"] == "peerlog.test" and line["time"].endswith("+00:00")
    assert line["trace_id"] == trace.format_trace_id(ids.trace_id)
    assert line["span_id"] == trace.format_span_id(ids.span_id)


def test_a_line_outside_any_span_has_no_trace_and_keeps_its_exception():
    try:
        raise ValueError("boom")
    except ValueError as exc:
        line = _line("failed", exc_info=(type(exc), exc, exc.__traceback__))
    assert "trace_id" not in line and "ValueError: boom" in line["exception"]


def test_record_headers_carry_the_current_span_as_w3c_traceparent_and_back():
    assert record_headers() == []  # nothing recording: no header is written
    with TracerProvider().get_tracer("t").start_as_current_span("call") as span:
        headers = record_headers()
    assert [name for name, _ in headers] == ["traceparent"]
    carried = trace.get_current_span(context_from(headers)).get_span_context()
    assert carried.trace_id == span.get_span_context().trace_id and carried.is_remote


def test_a_request_to_a_url_holding_credentials_leaves_no_part_of_them_in_the_log(caplog):
    configure(LogSettings(level="debug"))
    with (
        caplog.at_level(logging.DEBUG),
        httpx.Client(transport=httpx.MockTransport(lambda _: httpx.Response(204))) as c,
    ):
        c.post("https://user:s3cret@hooks.example.com/T0/B0?token=abc123", content=b"{}")
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "s3cret" not in logged and "abc123" not in logged
