"""Bounded staleness: a write that does not wait for its projection is still not acknowledged while the
projector is far behind it.

Writers that never wait can append faster than the projector applies: at full ingest on two cores the
API took the CPU, the projector got a quarter of a core and fell 20–40 s behind (tests/bench/README.md),
so a read right after a write missed it for that long. Here such a write (AddMessages) is acknowledged
once, on every partition it wrote, the projector is at most `backlog` records behind its position, or
after `max_wait_s`. Writers then slow to what the projector keeps up with, and the CPU they leave goes
to it. A projector that is down delays each write by at most `max_wait_s`; the write is on the log
either way, so it is acknowledged either way.

One query serves every waiting write: waiters share the refresh in flight, at most one per `interval_s`.
"""

from __future__ import annotations

import asyncio
import logging
import time

from sqlalchemy.ext.asyncio import AsyncEngine

from projections import status_reads
from services.bus.consistency import ConsistencyToken

log = logging.getLogger(__name__)


class Backpressure:
    def __init__(self, engine: AsyncEngine, backlog: int, max_wait_s: float, interval_s: float = 0.02) -> None:
        self._engine = engine
        self._backlog = backlog
        self._max_wait_s = max_wait_s
        self._interval_s = interval_s
        self._projected: dict[tuple[str, int], int] = {}  # next offset to apply, per (topic, partition)
        self._refresh: asyncio.Future | None = None
        self._refreshed_at = 0.0

    async def admit(self, token: ConsistencyToken) -> None:
        """Return once the projector is within `backlog` records of every position of `token`, or after
        `max_wait_s` (0 records: never wait)."""
        if self._backlog <= 0:
            return
        due = {tp: offset - self._backlog for tp, offset in token.offsets.items() if offset >= self._backlog}
        deadline = time.monotonic() + self._max_wait_s
        while not self._within(due):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(asyncio.shield(self._refreshing()), left)
            except TimeoutError:
                return
            except Exception:  # noqa: BLE001 — the write is committed: a failed look at the projector can't undo it
                log.warning("could not read the projector's position; acknowledging without waiting", exc_info=True)
                return

    def _within(self, due: dict[tuple[str, int], int]) -> bool:
        return all(self._projected.get(tp, 0) > offset for tp, offset in due.items())

    def _refreshing(self) -> asyncio.Future:
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.ensure_future(self._refresh_positions())
            # its waiters may all have given up: its failure is then nobody's to see
            self._refresh.add_done_callback(lambda f: f.cancelled() or f.exception())
        return self._refresh

    async def _refresh_positions(self) -> None:
        await asyncio.sleep(max(0.0, self._refreshed_at + self._interval_s - time.monotonic()))
        async with self._engine.connect() as conn:
            self._projected = await status_reads.projected_offsets(conn)
        self._refreshed_at = time.monotonic()
