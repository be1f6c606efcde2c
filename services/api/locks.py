"""Locks around a check-then-append: per-key asyncio locks, with which one API process serialises a
control-plane write, and Postgres advisory locks, which serialise across API processes."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar
from weakref import WeakKeyDictionary

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, PendingRollbackError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from projections.outages import sqlstate

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


GIVE_UP_CHECK_S = 0.25  # how often a queued waiter looks whether its caller was answered
QUERY_CANCELED = "57014"

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

    Session advisory locks, queued for in Postgres: first come, first served across processes. A waiter
    whose caller was answered (`gave_up()`) has its wait cancelled and raises GaveUp. Queued for until the
    key was free, abandoned waiters kept their slot of `holders` and their connection however long the
    projector kept the holder's write unreadable, and took every slot of the process; tried with pauses, or
    queued for in slices of a lock_timeout, a waiter lost its place to writers that came after it."""
    holders = holders or slots(_HOLDERS, engine, engine.pool.size() // 2)
    ordered = sorted({scoped_key(engine, k) for k in keys})
    async with holders, engine.connect() as conn:
        if not await _queued(engine, conn, ordered, gave_up):
            raise GaveUp("its caller was answered while it waited for a lock")
        try:
            yield conn
        finally:
            await _let_go(conn, lambda: _unlock(conn, ordered))


async def _let_go(conn: AsyncConnection, release: Callable[[], Awaitable[object]]) -> None:
    """`release()` the session's locks, unless the connection broke: the session ended with it, and its
    locks too. Released on it anyway, the body's own error (Postgres restarted under it) was lost to a
    PendingRollbackError, which callers were told as INTERNAL. A release that fails ends the session, so no
    lock is left held on a pooled connection."""
    if conn.invalidated:
        return
    try:
        await release()
    except (DBAPIError, PendingRollbackError):
        await conn.invalidate()


_LOCK = text("SELECT pg_advisory_lock(k) FROM unnest(CAST(:keys AS bigint[])) AS k")
# of `keys`, those this session holds: a lock taken before a statement failed outlives the failure
_OWN = text(
    "SELECT k FROM unnest(CAST(:keys AS bigint[])) AS k WHERE EXISTS (SELECT 1 FROM pg_locks WHERE "
    "locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND ((classid::bigint << 32) | objid::bigint) = k)"
)


async def _queued(engine: AsyncEngine, conn: AsyncConnection, keys: list[int], gave_up: Callable[[], bool]) -> bool:
    """Take every lock of `keys` on `conn`'s session, waiting in Postgres's queue; False once `gave_up()`."""
    if gave_up():
        return False
    if await _tried(conn, keys):  # free: the common case, one statement
        return True
    pid = await conn.scalar(text("SELECT pg_backend_pid()"))
    waiting, cancelled = asyncio.ensure_future(conn.execute(_LOCK, {"keys": keys})), False
    while not waiting.done():
        await asyncio.wait({waiting}, timeout=GIVE_UP_CHECK_S)
        if not waiting.done() and gave_up():
            # answered: cancel the wait. Granted meanwhile, the statement is over and the backend idle, which
            # ignores a cancel; granted as it lands, the statement fails holding locks, let go below
            async with engine.connect() as other:
                cancelled = await other.scalar(text("SELECT pg_cancel_backend(:pid)"), {"pid": pid})
            break
    try:
        await waiting
    except DBAPIError as err:
        if sqlstate(err) != QUERY_CANCELED:
            raise
        await conn.rollback()
        await _unlock(conn, list(await conn.scalars(_OWN, {"keys": keys})))
        return False
    if gave_up():  # granted, but its caller was answered: nothing to hold it for
        if cancelled:
            await _absorbed(conn)
        await _unlock(conn, keys)
        return False
    return True


async def _absorbed(conn: AsyncConnection) -> None:
    """A statement for a cancel sent to a wait that was granted first, should it land late."""
    try:
        await conn.execute(text("SELECT 1"))
    except DBAPIError as err:
        if sqlstate(err) != QUERY_CANCELED:
            raise
        await conn.rollback()


async def _tried(conn: AsyncConnection, keys: list[int]) -> bool:
    """Take every lock of `keys` on `conn`'s session at once, or none (those taken are let go again)."""
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


SHARED_RETRY_S = 0.05  # between tries of a shared lock an exclusive holder (or waiter) has


class NotGranted(Exception):
    """A lock not granted within the time its taker would wait (nothing was done under it)."""


@asynccontextmanager
async def shared(
    engine: AsyncEngine, key: tuple[str, ...], gave_up: Callable[[], bool] = _never, within_s: float | None = None
) -> AsyncIterator[AsyncConnection]:
    """`key`'s advisory lock taken shared for the body, on the connection yielded: writes that only add to an
    entity (messages to a session) go side by side, and wait while an exclusive writer (`held`, such as
    RemoveMembers) checks and appends. Tried, not queued for: a try refused while an exclusive writer holds
    or waits for the key (Postgres grants no request past a waiting one that conflicts), so the exclusive
    writer is never starved, and a cancelled caller leaves no statement waiting on its connection. Raises
    GaveUp once `gave_up()` (its caller was answered without it), NotGranted after `within_s` seconds."""
    k = scoped_key(engine, key)
    deadline = None if within_s is None else time.monotonic() + within_s
    while True:
        if gave_up():
            raise GaveUp("its caller was answered while it waited for a lock")
        if deadline is not None and time.monotonic() > deadline:
            raise NotGranted(f"the lock was not granted in {within_s:g} s")
        # the connection goes back to the pool between tries: an exclusive writer holds the key until its
        # write is readable, and writers waiting for it with a connection each took every one it needed
        async with engine.connect() as conn:
            if await conn.scalar(text("SELECT pg_try_advisory_lock_shared(:k)"), {"k": k}):
                try:
                    yield conn
                finally:
                    await _let_go(conn, lambda: conn.execute(text("SELECT pg_advisory_unlock_shared(:k)"), {"k": k}))
                return
        await asyncio.sleep(SHARED_RETRY_S)


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
