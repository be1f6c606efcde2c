"""Locks around a check-then-append: per-key asyncio locks, with which one API process serialises a
control-plane write, and Postgres advisory locks, which serialise across API processes."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar
from weakref import WeakKeyDictionary

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

T = TypeVar("T")


class KeyedLocks:
    """One lock per key, kept only while someone holds or waits for it (so keys never pile up)."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._locks


async def unheld(engine: AsyncEngine, key: tuple[str, ...]) -> bool:
    """Whether no API process holds `key`'s advisory lock now (taken and let go at once if free)."""
    async with engine.connect() as conn:
        k = scoped_key(engine, key)
        if not await conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": k}):
            return False
        await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": k})
        return True


def scoped_key(engine: AsyncEngine, parts: Sequence[str]) -> int:
    """The advisory lock key of `parts` within the projection schema `engine` serves: advisory locks are the
    database's, and two deployments (or test runs) sharing one must never hold each other's keys."""
    schema = (engine.get_execution_options().get("schema_translate_map") or {}).get(None) or ""
    return advisory_key(schema, *parts)


def advisory_key(*parts: str) -> int:
    """A Postgres advisory lock key for `parts`: 64 bits of their hash."""
    return int.from_bytes(hashlib.sha256("\0".join(parts).encode()).digest()[:8], "big", signed=True)


class GaveUp(Exception):
    """A lock's waiter stopped waiting: its caller was answered without it (nothing was written)."""


def _never() -> bool:
    return False


FIRST_TRY_S, LAST_TRY_S = 0.005, 0.1  # between two tries of a held lock: doubling from the first to the last

# a holder keeps one pooled connection while its write waits for the projector: at most half the pool's
# size of them, so keyed writes (idempotency.py) and reads always find a connection
_HOLDERS: WeakKeyDictionary[AsyncEngine, asyncio.Semaphore] = WeakKeyDictionary()


def slots(table: WeakKeyDictionary, engine: AsyncEngine, size: int) -> asyncio.Semaphore:
    """The semaphore bounding the holders of one kind on `engine` (`size` of them at most)."""
    return table.setdefault(engine, asyncio.Semaphore(max(1, size)))


@asynccontextmanager
async def held(
    engine: AsyncEngine,
    keys: Sequence[tuple[str, ...]],
    gave_up: Callable[[], bool] = _never,
    holders: asyncio.Semaphore | None = None,
) -> AsyncIterator[AsyncConnection]:
    """`keys` (such as ("message", workspace, id)) held across API processes for the body, for a write
    that checks the projection, then appends: two such writes of one entity on two processes would
    both pass the check, and both be acknowledged. Yields the connection holding them.

    Session advisory locks, tried (all or none) rather than waited for: a waiter holds a slot of `holders`
    and a connection only while it tries, and stops, raising GaveUp, once `gave_up()` says its caller was
    answered. Blocked in pg_advisory_lock it held both until the key was free, however long the projector
    kept that key's write unreadable, and enough abandoned waiters took every slot of the process; and a
    waiter cancelled in there could be granted the lock on a connection going back to the pool."""
    holders = holders or slots(_HOLDERS, engine, engine.pool.size() // 2)
    ordered, pause = sorted({scoped_key(engine, k) for k in keys}), FIRST_TRY_S
    while not gave_up():
        async with holders, engine.connect() as conn:
            if await _tried(conn, ordered):
                try:
                    yield conn
                finally:
                    await _unlock(conn, ordered)
                return
        await asyncio.sleep(pause)
        pause = min(2 * pause, LAST_TRY_S)
    raise GaveUp("its caller was answered while it waited for a lock")


async def _tried(conn: AsyncConnection, keys: list[int]) -> bool:
    """Take every lock of `keys` on `conn`'s session, or none (those taken are let go again)."""
    taken = await conn.scalar(
        text(
            "SELECT coalesce(array_agg(k) FILTER (WHERE pg_try_advisory_lock(k)), '{}') "
            "FROM unnest(CAST(:keys AS bigint[])) AS k"
        ),
        {"keys": keys},
    )
    if len(taken) == len(keys):
        return True
    await _unlock(conn, taken)
    return False


async def _unlock(conn: AsyncConnection, keys: Sequence[int]) -> None:
    if keys:
        await conn.execute(
            text("SELECT pg_advisory_unlock(k) FROM unnest(CAST(:keys AS bigint[])) AS k"), {"keys": list(keys)}
        )


def started(work: Awaitable[T]) -> asyncio.Future[T]:
    """`work` running as a task of its own (with a copy of the caller's context), whose error nobody
    awaiting it is no fault: the caller may be gone."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return task


async def shielded(work: Awaitable[T]) -> T:
    """`work`'s result, run to its end even when the caller gives up (a deadline, a cancel): a write that
    holds a lock must not free it before its append is readable."""
    return await asyncio.shield(started(work))
