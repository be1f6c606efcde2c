"""One derivation run (services/rederivation: rederive, promote, retry) per workspace at a time, and one
`peerlog reembed` per workspace and model.

Two runs over the same pair would each derive what the other has not finished yet, so a message would
land in two batches of one derivation; two promotes could interleave one's catch-up with the other's
promotion; two reembeds with one model would each plan, and append, every vector the other appends. A
Postgres session-level advisory lock held for the whole run makes the second run stop at once with a
message instead; if the holder dies, its session ends and the lock goes with it.

A session can also end under a run that is still alive: Postgres restarted, or the connection was
killed. The lock is then gone and a second run may hold it, so the first one checks that its session
still holds it before each append (`Held.guarded`) and stops, appending nothing more, when it does not.
What is left is the time of one append between the check and the write.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

_TRY = text("SELECT pg_try_advisory_lock(hashtextextended(:key, 0))")
_RELEASE = text("SELECT pg_advisory_unlock(hashtextextended(:key, 0))")
# a run's connection holds this one advisory lock; one a reconnect made would hold none
_STILL_HELD = text(
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted)"
)


class RunInProgress(RuntimeError):
    """Another run holds the lock (a derivation run on the workspace, or a reembed of it with the model)."""


class LockLost(RuntimeError):
    """The run's session no longer holds its lock (Postgres restarted or dropped the connection)."""


class Held:
    """A lock held by the session of `conn`, for the whole run."""

    def __init__(self, conn, what: str) -> None:
        self._conn, self._what = conn, what

    async def check(self) -> None:
        """LockLost unless this run's session still holds the lock."""
        try:
            held = (await self._conn.execute(_STILL_HELD)).scalar()
            await self._conn.commit()
        except Exception as err:  # noqa: BLE001 - any failure: the session, and so the lock, may be gone
            raise LockLost(self._lost(f"Postgres dropped its connection: {type(err).__name__}")) from err
        if not held:
            raise LockLost(self._lost("its Postgres session no longer holds it"))

    def _lost(self, why: str) -> str:
        return (
            f"this run lost the lock of {self._what} ({why}), so another run may have started: it stopped "
            "before appending more. Run it again: it carries on from what is on the log"
        )

    def guarded(self, append: Callable[[Sequence[Any]], Awaitable[Any]]) -> Callable[[Sequence[Any]], Awaitable[Any]]:
        """`append`, checking the lock right before each call."""

        async def checked(events: Sequence[Any]) -> Any:
            await self.check()
            return await append(events)

        return checked


def exclusive(settings, workspace_id: str):
    """Hold the workspace's derivation-run lock for the body (as a Held), or raise RunInProgress."""
    return _held(
        settings,
        f"peerlog-derivation-run:{workspace_id}",
        f"workspace {workspace_id!r}",
        f"another rederive, promote or retry is running on workspace {workspace_id!r}; "
        "run this again when it has finished",
    )


def reembedding(settings, workspace_id: str, model: str):
    """Hold the lock of reembedding the workspace with `model` for the body (as a Held), or raise
    RunInProgress."""
    return _held(
        settings,
        f"peerlog-reembed:{workspace_id}:{model}",
        f"reembedding workspace {workspace_id!r} with {model}",
        f"another reembed of workspace {workspace_id!r} with {model} is running; "
        "run this again when it has finished (it then appends only what that one did not)",
    )


@asynccontextmanager
async def _held(settings, key: str, what: str, busy: str) -> AsyncIterator[Held]:
    params = {"key": key}
    engine = create_async_engine(settings.database.url, poolclass=NullPool, **settings.database.engine_args())
    try:
        async with engine.connect() as conn:
            got = (await conn.execute(_TRY, params)).scalar()
            await conn.commit()  # a session lock: it outlives the transaction that took it
            if not got:
                raise RunInProgress(busy)
            try:
                yield Held(conn, what)
            finally:
                await _release(conn, params)
    finally:
        await engine.dispose()


async def _release(conn, params: dict) -> None:
    """Let the lock go; a session already gone has nothing to let go of."""
    try:
        await conn.execute(_RELEASE, params)
        await conn.commit()
    except Exception:  # noqa: BLE001 - the lock ended with its session; the run's own error, if any, is raised
        pass
