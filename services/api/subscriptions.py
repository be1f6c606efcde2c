"""Subscribe: the workspace's events from a cursor, then new ones as they are written, until cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

from services.api import validation as v
from services.api.deps import ApiDeps
from services.bus.subscription import Delivered, Filter, LogSubscription, Position
from services.errors import ResourceExhausted

POLL_S = 0.5  # how long one blocking poll holds the stream's thread: also how soon a cancelled stream lets go


class Streams:
    """How many Subscribe streams this process serves, at most `most`: each holds a Kafka consumer and a
    thread, so a caller opening streams without end would otherwise exhaust the process."""

    def __init__(self, most: int) -> None:
        self.most, self.open = most, 0

    @contextmanager
    def one(self) -> Iterator[None]:
        if self.open >= self.most:
            raise ResourceExhausted(
                f"this API process already serves {self.most} Subscribe streams (PEERLOG_API_MAX_SUBSCRIPTIONS): "
                "close one, retry later, or take the events by webhook"
            )
        self.open += 1
        try:
            yield
        finally:
            self.open -= 1


async def subscribe(
    ctx: ApiDeps, workspace_id: str, types: Sequence[str], cursor: Mapping[Position, int], from_end: bool
) -> AsyncIterator[Delivered]:
    """Every wanted event from `cursor` on, in log order per partition, for as long as the caller reads."""
    v.check_id("workspace_id", workspace_id)
    subscription = LogSubscription(ctx.log.kafka, Filter(workspace_id, frozenset(types)), cursor, from_end)
    # a thread of its own: a stream polls for as long as it lives and must not take the shared pool's few
    thread = ThreadPoolExecutor(1, thread_name_prefix="subscribe")
    running: Future = thread.submit(subscription.start)
    try:
        await asyncio.wrap_future(running)
        while True:
            running = thread.submit(subscription.poll, POLL_S)
            for delivered in await asyncio.wrap_future(running):
                yield delivered
    finally:
        # a cancelled stream's poll may still be running: the consumer is closed after it, on the same thread
        thread.submit(subscription.close)
        thread.shutdown(wait=False)
