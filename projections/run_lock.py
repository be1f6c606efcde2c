"""One derivation run (services/rederivation: rederive, promote, retry) per workspace at a time.

Two runs over the same pair would each derive what the other has not finished yet, so a message would
land in two batches of one derivation; two promotes could interleave one's catch-up with the other's
promotion. A Postgres session-level advisory lock held for the whole run makes the second run stop at
once with a message instead; if the holder dies, its session ends and the lock goes with it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

_TRY = text("SELECT pg_try_advisory_lock(hashtextextended(:key, 0))")
_RELEASE = text("SELECT pg_advisory_unlock(hashtextextended(:key, 0))")


class RunInProgress(RuntimeError):
    """Another derivation run holds the workspace."""


@asynccontextmanager
async def exclusive(settings, workspace_id: str) -> AsyncIterator[None]:
    """Hold the workspace's derivation-run lock for the body, or raise RunInProgress."""
    key = {"key": f"peerlog-derivation-run:{workspace_id}"}
    engine = create_async_engine(settings.database.url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            got = (await conn.execute(_TRY, key)).scalar()
            await conn.commit()  # a session lock: it outlives the transaction that took it
            if not got:
                raise RunInProgress(
                    f"another rederive, promote or retry is running on workspace {workspace_id!r}; "
                    "run this again when it has finished"
                )
            try:
                yield
            finally:
                await conn.execute(_RELEASE, key)
                await conn.commit()
    finally:
        await engine.dispose()
