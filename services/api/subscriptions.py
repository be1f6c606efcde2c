"""Subscribe: the workspace's events from a cursor, then new ones as they are written, until cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from services.api import validation as v
from services.api.deps import ApiDeps
from services.bus.subscription import Delivered, Filter, LogSubscription, Position

POLL_S = 0.5  # how long one blocking poll holds the stream's thread: also how soon a cancelled stream lets go


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
