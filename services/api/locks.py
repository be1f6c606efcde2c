"""Locks around a check-then-append: per-key asyncio locks, with which one API process serialises a
control-plane write, and Postgres advisory locks, which serialise across API processes."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Hashable, Sequence
from contextlib import asynccontextmanager

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection


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
