"""The metrics and tracing interceptor: every RPC counted and timed by method and status code, and traced.

Outermost, so calls the auth interceptor refuses are counted too. The span continues a trace the caller
sent (W3C traceparent in the metadata); events the call appends carry it on to the processors.
"""

from __future__ import annotations

import asyncio
import inspect
import time

import grpc
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from prometheus_client import Counter, Histogram

from services import tracing

REQUESTS = Counter("peerlog_rpc_requests_total", "RPCs answered, by method and status code", ["method", "code"])
LATENCY = Histogram(
    "peerlog_rpc_duration_seconds",
    "Time from a call's arrival to its status, by method and status code",
    ["method", "code"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)


class _Call:
    """One call's span and clock; `end` records its outcome."""

    def __init__(self, method: str, metadata) -> None:
        self.method = method
        self.started = time.perf_counter()
        service, _, name = method.lstrip("/").partition("/")
        self._span_args = dict(
            name=method.lstrip("/"),
            context=tracing.context_from(metadata),
            kind=SpanKind.SERVER,
            attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": name},
            **tracing.QUIET_FAILURES,  # `end` sets the status: the code's name, never an exception's text
        )

    def current_span(self):
        """The call's span, current for the `with` block (a unary call: one task from start to end)."""
        return tracing.TRACER.start_as_current_span(**self._span_args)

    def span(self) -> trace.Span:
        """The call's span, not made current: a stream makes it current around each step of its handler."""
        return tracing.TRACER.start_span(**self._span_args)

    def code(self, context: grpc.aio.ServicerContext, exc: BaseException | None) -> grpc.StatusCode:
        # a stream's generator is closed (GeneratorExit) when the client goes away; a call whose deadline
        # passed is cancelled too, and its client was told DEADLINE_EXCEEDED
        if isinstance(exc, asyncio.CancelledError | GeneratorExit):
            remaining = context.time_remaining()
            return (
                grpc.StatusCode.DEADLINE_EXCEEDED
                if remaining is not None and remaining <= 0
                else grpc.StatusCode.CANCELLED
            )
        set_code = context.code()  # what an abort set; None when the handler returned normally
        if set_code is not None:
            return set_code
        return grpc.StatusCode.OK if exc is None else grpc.StatusCode.UNKNOWN  # a bug the error table missed

    def end(self, span, context: grpc.aio.ServicerContext, exc: BaseException | None) -> None:
        code = self.code(context, exc)
        REQUESTS.labels(method=self.method, code=code.name).inc()
        LATENCY.labels(method=self.method, code=code.name).observe(time.perf_counter() - self.started)
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code is not grpc.StatusCode.OK:
            span.set_status(Status(StatusCode.ERROR, code.name))


def _observed_unary(inner, method: str):
    async def observed(request, context: grpc.aio.ServicerContext):
        call = _Call(method, context.invocation_metadata())
        with call.current_span() as span:
            try:
                reply = await inner(request, context)
            except BaseException as exc:
                call.end(span, context, exc)
                raise
            call.end(span, context, None)
            return reply

    return observed


def _observed_stream(inner, method: str):
    async def observed(request, context: grpc.aio.ServicerContext):
        """The span is current only while the handler runs, not across a yield: grpc closes a cancelled
        stream from another context, where a context attached before the yield cannot be detached."""
        call = _Call(method, context.invocation_metadata())
        span, items = call.span(), inner(request, context)
        try:
            while True:
                with trace.use_span(span, end_on_exit=False):
                    try:
                        item = await anext(items)
                    except StopAsyncIteration:
                        break
                yield item
            call.end(span, context, None)
        except BaseException as exc:
            call.end(span, context, exc)
            await items.aclose()
            raise
        finally:
            span.end()

    return observed


class TelemetryInterceptor(grpc.aio.ServerInterceptor):
    """Counts, times and traces unary, server-streaming (async generator) and client-streaming calls."""

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _observed_unary(handler.unary_unary, details.method),
                handler.request_deserializer,
                handler.response_serializer,
            )
        if handler.unary_stream is not None and inspect.isasyncgenfunction(handler.unary_stream):
            return grpc.unary_stream_rpc_method_handler(
                _observed_stream(handler.unary_stream, details.method),
                handler.request_deserializer,
                handler.response_serializer,
            )
        if handler.stream_unary is not None:  # a client stream (UploadFile) answers once, as a unary call does
            return grpc.stream_unary_rpc_method_handler(
                _observed_unary(handler.stream_unary, details.method),
                handler.request_deserializer,
                handler.response_serializer,
            )
        return handler  # grpc's own Health.Watch writes instead of yielding: left as it is
