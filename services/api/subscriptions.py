"""Subscribe: the workspace's events from a cursor, then new ones as they are written, until cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager

from services.api import slots
from services.api.deps import ApiDeps
from services.api.guards import require_workspace
from services.api.slots import Slots, holding
from services.bus.subscription import Delivered, Filter, LogSubscription, Position

POLL_S = 0.5  # how long one blocking poll holds the stream's thread: also how soon a cancelled stream lets go


class Streams:
    """How many Subscribe streams this process serves, at most `most`, and at most `per_workspace` of one
    workspace: each holds a Kafka consumer and a thread, so a caller opening streams without end would
    otherwise exhaust the process, and one tenant's idle streams would lock every other tenant out."""

    def __init__(self, most: int, per_workspace: int) -> None:
        self.of_workspace = slots.per_workspace(
            per_workspace,
            "Subscribe streams open",
            "PEERLOG_API_MAX_SUBSCRIPTIONS_PER_WORKSPACE",
            "close one, raise the setting, or take the events by webhook",
        )
        self.all = Slots(
            most,
            lambda _, held: (
                f"this API process already serves {held} Subscribe streams "
                "(PEERLOG_API_MAX_SUBSCRIPTIONS): close one, retry later, raise the setting, or take the events by "
                "webhook"
            ),
        )

    def one(self, workspace_id: str) -> AbstractContextManager[None]:
        return holding((self.of_workspace, workspace_id), (self.all, ""))


async def subscribe(
    ctx: ApiDeps, workspace_id: str, types: Sequence[str], cursor: Mapping[Position, int], from_end: bool
) -> AsyncIterator[Delivered]:
    """Every wanted event from `cursor` on, in log order per partition, for as long as the caller reads."""
    wanted = Filter(workspace_id, frozenset(types))
    await require_workspace(ctx, workspace_id)  # else a stream of an unknown workspace stays open and silent
    subscription = LogSubscription(ctx.log.kafka, wanted, cursor, from_end)
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
