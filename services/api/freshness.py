"""Read-your-writes: wait until the projections include the positions in a consistency token."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import TypeVar

from services.api.projected import ProjectedPositions
from services.bus.consistency import ConsistencyToken
from services.bus.log_ends import LogEnds
from services.errors import Unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")


class Freshness:
    def __init__(self, projected: ProjectedPositions, timeout_s: float, ends: LogEnds | None = None) -> None:
        self._projected = projected
        self._timeout_s = timeout_s
        self._ends = ends  # None: no check against the log (a token is only waited for)

    @property
    def timeout_s(self) -> float:
        """How long `wait` waits before it gives up."""
        return self._timeout_s

    async def wait(self, token: ConsistencyToken | str | None) -> None:
        """Return once every (topic, partition, offset) of `token` is projected; else Unavailable."""
        if isinstance(token, str):
            token = ConsistencyToken.decode(token)
        if not token or not token.offsets:
            return
        if self._ends is not None:
            await self._ends.check(token)  # what no write can have made would only hold the call, then fail
        if not await self._projected.until(token.offsets, time.monotonic() + self._timeout_s):
            raise Unavailable(
                f"the projections have not caught up with consistency token {token.encode()!r} "
                f"after {self._timeout_s:g} s; the projector may be down or far behind"
            )


async def until_projected(freshness: Freshness, token: str) -> None:
    """Wait, however long, until `token` is projected: a lock held over a write is let go only once a
    later holder's check can see what it wrote."""
    while True:
        try:
            return await freshness.wait(token)
        except Unavailable:
            log.warning("a write holding a lock waits for the projector; the lock stays held meanwhile")


async def answered_in_time(freshness: Freshness, held: Awaitable[T], what: str, then: str, keyed: bool = False) -> T:
    """The result of `held` (a write under a lock, shielded: it runs to its end whatever the caller does),
    if it comes within the consistency wait; else UNAVAILABLE saying `what` is late and what to do `then`,
    while `held` goes on. `keyed`: under an idempotency key, whose wait (idempotency.once) bounds it
    already, and holds the key for as long as `held` runs."""
    if keyed:
        return await held
    try:
        return await asyncio.wait_for(held, freshness.timeout_s)
    except TimeoutError:
        raise Unavailable(
            f"{what} is on the log but not readable after {freshness.timeout_s:g} s (the projector may be "
            f"behind); {then}"
        ) from None
