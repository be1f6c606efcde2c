"""Locks around a check-then-append: per-key asyncio locks, with which one API process serialises a
control-plane write, and Postgres advisory locks, which serialise across API processes."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Hashable, Sequence
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


@asynccontextmanager
async def advisory(conn: AsyncConnection, keys: Sequence[int]) -> AsyncIterator[None]:
    """Session advisory locks on `keys`, held on `conn` for the body. Taken in ascending order, so two
    holders of overlapping sets cannot deadlock; a dead process's connection drops them."""
    ordered = sorted(set(keys))
    await conn.execute(text("SELECT pg_advisory_lock(k) FROM unnest(CAST(:keys AS bigint[])) AS k"), {"keys": ordered})
    try:
        yield
    finally:
        await conn.execute(
            text("SELECT pg_advisory_unlock(k) FROM unnest(CAST(:keys AS bigint[])) AS k"), {"keys": ordered}
        )


# a holder keeps one pooled connection while its write waits for the projector: at most half the pool's
# size of them, so keyed writes (idempotency._HOLDERS) and reads always find a connection
_HOLDERS: WeakKeyDictionary[AsyncEngine, asyncio.Semaphore] = WeakKeyDictionary()


@asynccontextmanager
async def held(engine: AsyncEngine, keys: Sequence[tuple[str, ...]]) -> AsyncIterator[None]:
    """`keys` (such as ("message", workspace, id)) held across API processes for the body, for a write
    that checks the projection, then appends: two such writes of one entity on two processes would
    both pass the check, and both be acknowledged."""
    holders = _HOLDERS.setdefault(engine, asyncio.Semaphore(max(1, engine.pool.size() // 2)))
    async with holders, engine.connect() as conn, advisory(conn, [scoped_key(engine, k) for k in keys]):
        yield


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
