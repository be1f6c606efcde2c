"""A server stream's span is made current only while its handler runs, never across a yield: grpc closes a
cancelled stream from another context, where detaching a context attached before the yield failed (the
long fuzz's API log held 18 "Failed to detach context" errors, one per cancelled stream)."""

from __future__ import annotations

import asyncio
import logging

from opentelemetry import trace

from services.api import telemetry


class FakeContext:
    def invocation_metadata(self):
        return ()

    def code(self):
        return None


async def test_a_stream_closed_from_another_task_detaches_nothing_and_is_counted_cancelled(caplog):
    seen_spans = []

    async def inner(request, context):
        for i in range(3):
            seen_spans.append(trace.get_current_span())
            yield i

    observed = telemetry._observed_stream(inner, "/peerlog.v1.Test/Stream")
    stream = observed(None, FakeContext())
    before = telemetry.REQUESTS.labels(method="/peerlog.v1.Test/Stream", code="CANCELLED")._value.get()
    with caplog.at_level(logging.ERROR, logger="opentelemetry.context"):
        assert await asyncio.create_task(stream.__anext__()) == 0
        await asyncio.create_task(stream.aclose())  # what grpc does when the client goes away
    assert not [r for r in caplog.records if "detach" in r.getMessage()]
    assert seen_spans  # the handler ran
    after = telemetry.REQUESTS.labels(method="/peerlog.v1.Test/Stream", code="CANCELLED")._value.get()
    assert after == before + 1


async def test_a_stream_that_ends_is_counted_ok():
    async def inner(request, context):
        yield 1
        yield 2

    observed = telemetry._observed_stream(inner, "/peerlog.v1.Test/Ends")
    before = telemetry.REQUESTS.labels(method="/peerlog.v1.Test/Ends", code="OK")._value.get()
    assert [item async for item in observed(None, FakeContext())] == [1, 2]
    assert telemetry.REQUESTS.labels(method="/peerlog.v1.Test/Ends", code="OK")._value.get() == before + 1
