"""The projector's positions as this API process last read them, for the calls that wait on the
projector: reads with a consistency token (freshness.py) share one instance, writes held back while the
projector is far behind (backpressure.py) another, each with its own pace (server.py).

Each read used to poll Postgres on its own, a query per read every 2–50 ms. Here one query serves every
waiter: a waiter first compares its positions with the last ones read (positions only grow, so a
position seen projected stays projected), and only when they fall short does it join the refresh in
flight, of which there is at most one per `interval_s`. A read whose token is already projected, the
usual case, costs no query at all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from sqlalchemy.ext.asyncio import AsyncEngine

from projections import status_reads

Positions = Mapping[tuple[str, int], int]  # (topic, partition) -> offset


class ProjectedPositions:
    def __init__(self, engine: AsyncEngine, interval_s: float) -> None:
        self._engine = engine
        self._interval_s = interval_s
        self._next: dict[tuple[str, int], int] = {}  # next offset to apply, per (topic, partition)
        self._refresh: asyncio.Future | None = None
        self._refreshed_at = 0.0
        self.refreshes = 0  # queries run: what sharing them saves shows here

    def passed(self, offsets: Positions) -> bool:
        """Whether every offset given was projected, as of the last positions read."""
        return all(self._next.get(tp, 0) > offset for tp, offset in offsets.items())

    async def until(self, offsets: Positions, deadline: float) -> bool:
        """Wait until every offset given is projected (True) or the monotonic `deadline` passes (False).
        A failed read of the positions is raised to every waiter sharing it."""
        while not self.passed(offsets):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(asyncio.shield(self._refreshing()), left)
            except TimeoutError:
                return self.passed(offsets)
        return True

    def _refreshing(self) -> asyncio.Future:
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.ensure_future(self._read())
            # its waiters may all have given up: its failure is then nobody's to see
            self._refresh.add_done_callback(lambda f: f.cancelled() or f.exception())
        return self._refresh

    async def _read(self) -> None:
        await asyncio.sleep(max(0.0, self._refreshed_at + self._interval_s - time.monotonic()))
        async with self._engine.connect() as conn:
            self._next = await status_reads.projected_offsets(conn)
        self._refreshed_at = time.monotonic()
        self.refreshes += 1
