"""Appends whose commit the log did not confirm (AppendUnresolved): the write may stand or not, and until its
transaction ends nobody can say which. The append waits for that end and then answers as the log decided: the
write's positions if it was committed, AppendFailed if it was aborted. Answered "it may have been" at once,
the caller could not know whether to send it again, and a lock held over the write was let go while it might
still land: a second clone into one id copied the source again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from services.bus.consistency import ConsistencyToken
from services.bus.producer import AppendFailed, AppendUnresolved, EventLog
from services.bus.streams import committed
from services.events import Event

log = logging.getLogger(__name__)

LOOK_EVERY_S = 0.25  # between two looks at an unconfirmed commit's transaction
# its own threads: a look takes one for a broker round trip or two, and the default executor embeds queries
_LOOKS = ThreadPoolExecutor(2, thread_name_prefix="commit-outcome")


async def appended(log_: EventLog, events: Sequence[Event], settle_s: float | None = None) -> ConsistencyToken:
    """Append `events`; if the log did not confirm the commit, wait until it is known how it ended (at most
    `settle_s`, then AppendUnresolved as the log said; None: however long, for a write holding a lock)."""
    try:
        return await log_.append(events)
    except AppendUnresolved as unresolved:
        if unresolved.positions is None:  # where its records went is not known: neither is its outcome
            raise
        try:
            kept = await asyncio.wait_for(_outcome(log_, unresolved.positions), settle_s)
        except TimeoutError:
            raise unresolved from None
        if kept:
            return unresolved.positions
        raise AppendFailed(
            "the log did not confirm the write's commit, then aborted it: nothing was written; send it again"
        ) from unresolved


async def _outcome(log_: EventLog, positions: ConsistencyToken) -> bool:
    """Whether the transaction that wrote `positions` was committed, once it has ended (the writer's next
    producer fences it, or the broker times it out). Each look is one question to the broker, on a thread
    of _LOOKS, and the waits between are the event loop's: writes looking at other open transactions never
    queue behind this one."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            known = await loop.run_in_executor(_LOOKS, committed, log_.kafka, positions, 0.0)
        except Exception as exc:  # noqa: BLE001 - the broker away: the outcome is still unknown, so look again
            log.warning("the outcome of a write whose commit was not confirmed is not known yet (%s)", exc)
            known = None
        if known is not None:
            return known
        await asyncio.sleep(LOOK_EVERY_S)
