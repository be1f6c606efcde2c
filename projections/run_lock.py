"""One derivation run (services/rederivation: rederive, promote, retry) per workspace at a time, and one
`peerlog reembed` per workspace and model.

Two runs over the same pair would each derive what the other has not finished yet, so a message would
land in two batches of one derivation; two promotes could interleave one's catch-up with the other's
promotion; two reembeds with one model would each plan, and append, every vector the other appends. A
Postgres session-level advisory lock held for the whole run makes the second run stop at once with a
message instead; if the holder dies, its session ends and the lock goes with it.
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
    """Another run holds the lock (a derivation run on the workspace, or a reembed of it with the model)."""


def exclusive(settings, workspace_id: str):
    """Hold the workspace's derivation-run lock for the body, or raise RunInProgress."""
    return _held(
        settings,
        f"peerlog-derivation-run:{workspace_id}",
        f"another rederive, promote or retry is running on workspace {workspace_id!r}; "
        "run this again when it has finished",
    )


def reembedding(settings, workspace_id: str, model: str):
    """Hold the lock of reembedding the workspace with `model` for the body, or raise RunInProgress."""
    return _held(
        settings,
        f"peerlog-reembed:{workspace_id}:{model}",
        f"another reembed of workspace {workspace_id!r} with {model} is running; "
        "run this again when it has finished (it then appends only what that one did not)",
    )


@asynccontextmanager
async def _held(settings, key: str, busy: str) -> AsyncIterator[None]:
    params = {"key": key}
    engine = create_async_engine(settings.database.url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            got = (await conn.execute(_TRY, params)).scalar()
            await conn.commit()  # a session lock: it outlives the transaction that took it
            if not got:
                raise RunInProgress(busy)
            try:
                yield
            finally:
                await conn.execute(_RELEASE, params)
                await conn.commit()
    finally:
        await engine.dispose()
