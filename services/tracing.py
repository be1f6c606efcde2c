"""OpenTelemetry traces across processes: W3C trace context travels in gRPC metadata and Kafka record headers.

Outside the import layers: the API, the bus and the model client all use it.
Without `setup` (PEERLOG_TRACING_EXPORTER=off) the tracer records nothing and no header is written.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import Field
from pydantic_settings import BaseSettings

from services.settings_base import prefixed

TRACER = trace.get_tracer("peerlog")
# W3C traceparent/tracestate only, whatever OTEL_PROPAGATORS says: every peerlog process reads the same headers
_W3C = TraceContextTextMapPropagator()


class TracingSettings(BaseSettings):
    """OpenTelemetry traces (`PEERLOG_TRACING_`): off unless an exporter is chosen."""

    model_config = prefixed("PEERLOG_TRACING_")

    exporter: Literal["off", "otlp"] = Field("off", description="otlp: export spans over OTLP/HTTP")
    endpoint: str = Field(
        "",
        description="OTLP/HTTP traces URL (e.g. http://127.0.0.1:4318/v1/traces); "
        "empty: the exporter's default or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    )
    sample_ratio: float = Field(
        1.0, ge=0, le=1, description="share of new traces recorded (a propagated trace follows its parent's decision)"
    )


def setup(settings: TracingSettings, service: str) -> None:
    """Record and export this process's spans over OTLP when an exporter is chosen; nothing otherwise."""
    if settings.exporter == "off":
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    provider = TracerProvider(
        resource=Resource.create({"service.name": service}),
        sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.endpoint or None)))
    trace.set_tracer_provider(provider)


# for a span whose failure could quote what a model server or a database sent back: OpenTelemetry would
# export str(error) as its status and an exception event
QUIET_FAILURES = {"record_exception": False, "set_status_on_exception": False}


def failed(span: trace.Span, description: str) -> None:
    """Marks `span` failed, saying only `description` (text a caller may see, or the error's kind)."""
    span.set_status(trace.Status(trace.StatusCode.ERROR, description))


def _own_span_context() -> trace.SpanContext | None:
    """The current span's context if this process started the span, else None.

    With tracing off the no-op tracer's span is the caller's own (remote) context, which must neither travel
    on nor name our log lines. Not `is_recording()`: a sampled-out span is ours too, and its traceparent
    carries the decision not to record on to the processors (a propagated trace follows its parent's).
    """
    context = trace.get_current_span().get_span_context()
    return context if context.is_valid and not context.is_remote else None


def record_headers() -> list[tuple[str, bytes]]:
    """The current span's context as Kafka record headers (none outside a span this process started)."""
    if _own_span_context() is None:
        return []
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return [(name, value.encode()) for name, value in carrier.items()]


def context_from(pairs: Iterable[tuple[str, str | bytes]] | None) -> Context:
    """The trace context carried by Kafka headers or gRPC metadata (an empty one when there is none)."""
    carrier = {
        name.lower(): value.decode(errors="replace") if isinstance(value, bytes) else value
        for name, value in pairs or ()
    }
    return _W3C.extract(carrier)


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) in hex of the span being handled, for log lines; None outside any we started."""
    context = _own_span_context()
    if context is None:
        return None
    return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)
