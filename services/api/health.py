"""Health that means something: every few seconds, whether Kafka and Postgres answer, reported through
the standard gRPC health service (SERVING / NOT_SERVING for every service and for "")."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from grpc_health.v1 import health, health_pb2
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from projections.settings import DatabaseSettings

log = logging.getLogger(__name__)

Check = Callable[[], Awaitable[bool]]


def probe_engine(settings: DatabaseSettings) -> AsyncEngine:
    """An engine for the health check alone, holding one connection of its own between checks.

    On the read pool the check queued behind slow reads, timed out, and a loaded server said NOT_SERVING
    with Postgres answering. Kept open, it is no new client at each check either: at max_connections every
    API process said NOT_SERVING at once while their pools still served. Pinged before each check, a
    connection a timed-out check left broken is replaced."""
    return create_async_engine(
        settings.url,
        pool_size=1,
        max_overflow=0,
        pool_pre_ping=True,
        isolation_level="AUTOCOMMIT",
        **settings.engine_args(),
    )


async def database_reachable(engine: AsyncEngine, timeout_s: float = 2.0) -> bool:
    """Whether Postgres answers a trivial query within `timeout_s`."""
    try:
        async with asyncio.timeout(timeout_s):
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        return True
    except (SQLAlchemyError, OSError, TimeoutError):
        return False


class HealthMonitor:
    """Runs `checks` every `interval_s` and sets every name in `names` to SERVING only when all pass."""

    def __init__(
        self, servicer: health.aio.HealthServicer, names: Iterable[str], checks: dict[str, Check], interval_s: float
    ) -> None:
        self._servicer = servicer
        self._names = tuple(names)
        self._checks = checks
        self._interval_s = interval_s
        self._down: list[str] | None = None  # None: not checked yet

    async def check_once(self) -> bool:
        """Check every dependency now and publish the result; True if all answered."""
        # a check that raises counts as down rather than ending health reporting
        results = await asyncio.gather(*(check() for check in self._checks.values()), return_exceptions=True)
        down = [name for name, ok in zip(self._checks, results) if ok is not True]
        if down != self._down:  # log transitions, not every round
            if down:
                log.warning("health: %s not answering; NOT_SERVING", ", ".join(down))
            elif self._down:
                log.info("health: %s answering again; SERVING", ", ".join(self._down))
        self._down = down
        status = health_pb2.HealthCheckResponse.NOT_SERVING if down else health_pb2.HealthCheckResponse.SERVING
        for name in self._names:
            await self._servicer.set(name, status)
        return not down

    async def run(self) -> None:
        """Check every `interval_s` (after the check the server makes before it starts); cancel to stop."""
        while True:
            await asyncio.sleep(self._interval_s)
            await self.check_once()
