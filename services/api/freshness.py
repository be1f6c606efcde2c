"""Read-your-writes: wait until the projections include the positions in a consistency token."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy.ext.asyncio import AsyncEngine

from projections import status_reads
from services.bus.consistency import ConsistencyToken
from services.bus.log_ends import LogEnds
from services.errors import Unavailable


class Freshness:
    def __init__(self, engine: AsyncEngine, timeout_s: float, ends: LogEnds | None = None) -> None:
        self._engine = engine
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
        deadline = time.monotonic() + self._timeout_s
        pause = 0.002
        while not await self._reached(token):
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"the projections have not caught up with consistency token {token.encode()!r} "
                    f"after {self._timeout_s:g} s; the projector may be down or far behind"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)

    async def _reached(self, token: ConsistencyToken) -> bool:
        async with self._engine.connect() as conn:
            done = await status_reads.projected_offsets(conn, list(token.offsets))
        return all(done.get(tp, 0) > offset for tp, offset in token.offsets.items())
