"""Bounded staleness: a write that does not wait for its projection is still not acknowledged while the
projector is far behind it.

Writers that never wait can append faster than the projector applies: at full ingest on two cores the
API took the CPU, the projector got a quarter of a core and fell 20–40 s behind (tests/bench/README.md),
so a read right after a write missed it for that long. Here such a write (AddMessages) is acknowledged
once, on every partition it wrote, the projector is at most `backlog` records behind its position, or
after `max_wait_s`. Writers then slow to what the projector keeps up with, and the CPU they leave goes
to it. A projector that is down delays each write by at most `max_wait_s`; the write is on the log
either way, so it is acknowledged either way.

The held-back writes share one read of the projector's positions, every 20 ms (projected.py, server.py).
"""

from __future__ import annotations

import logging
import time

from services.api.projected import ProjectedPositions
from services.bus.consistency import ConsistencyToken

log = logging.getLogger(__name__)


class Backpressure:
    def __init__(self, projected: ProjectedPositions, backlog: int, max_wait_s: float) -> None:
        self._projected = projected
        self._backlog = backlog
        self._max_wait_s = max_wait_s

    async def admit(self, token: ConsistencyToken) -> None:
        """Return once the projector is within `backlog` records of every position of `token`, or after
        `max_wait_s` (0 records: never wait)."""
        if self._backlog <= 0:
            return
        due = {tp: offset - self._backlog for tp, offset in token.offsets.items() if offset >= self._backlog}
        try:
            await self._projected.until(due, time.monotonic() + self._max_wait_s)
        except Exception:  # noqa: BLE001 — the write is committed: a failed look at the projector can't undo it
            log.warning("could not read the projector's position; acknowledging without waiting", exc_info=True)
