"""The locks a write holds over an entity across API processes (services/api/locks.py): first come, first
served between processes, and given up by a waiter whose caller was answered."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import text

from projections.db import async_engine
from services.api.locks import GaveUp, KeyedLocks, held, scoped_key, shared

KEY = ("session", "w", "s")
HOLD_S = 0.1  # one write holding the entity while it waits for its projection


async def warmed(*engines) -> None:
    """A connection open in each pool: opening one under load can take longer than a hold."""
    for engine in engines:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))


async def queued_for(engine, key, n: int) -> None:
    """Until `n` sessions wait in Postgres's queue for `key`'s advisory lock."""
    lock = scoped_key(engine, key)
    waiting = text(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND ((classid::bigint << 32) | objid::bigint) = :k"
    )
    for _ in range(600):
        async with engine.connect() as conn:
            if await conn.scalar(waiting, {"k": lock}) >= n:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{n} waiters for {key} never queued")


async def holds_before_the_other_process(settings) -> int:
    """With one API process's 20 writes of KEY queued behind each other, how many of them hold it after a
    write of KEY on a second process asked for it, before that write gets it."""
    one, two = async_engine(settings.database), async_engine(settings.database)
    queue, starts = KeyedLocks(), []

    async def write_on_one() -> None:
        async with queue.hold(KEY), held(one, [KEY]):
            starts.append(time.monotonic())
            await asyncio.sleep(HOLD_S)

    try:
        await warmed(one, two)
        writes = [asyncio.ensure_future(write_on_one()) for _ in range(20)]
        await asyncio.sleep(0.25)  # the first process's writes hold the key one after another
        asked = time.monotonic()
        async with held(two, [KEY]):
            got = time.monotonic()
        await asyncio.gather(*writes)
    finally:
        await one.dispose()
        await two.dispose()
    return sum(asked < t < got for t in starts)


async def test_a_write_on_another_process_gets_the_entity_at_the_next_release_not_after_a_whole_queue(settings):
    # tried rather than queued for, it lost to the first process's queue every time: 17 to 22 holds
    counts = [await holds_before_the_other_process(settings) for _ in range(3)]
    assert all(n <= 1 for n in counts), counts


async def test_writes_on_three_processes_get_the_entity_in_the_order_they_asked_behind_a_long_hold(settings):
    # a holder keeps the entity until its write is readable: often longer than any slice of a lock_timeout
    engines = [async_engine(settings.database) for _ in range(3)]
    served: list[str] = []

    async def write(name: str, engine) -> None:
        async with held(engine, [KEY]):
            served.append(name)

    try:
        await warmed(*engines)
        async with held(engines[0], [KEY]):
            first = asyncio.ensure_future(write("first", engines[1]))
            await queued_for(engines[0], KEY, 1)
            second = asyncio.ensure_future(write("second", engines[2]))
            await queued_for(engines[0], KEY, 2)
            await asyncio.sleep(0.8)  # longer than any slice of a lock_timeout would have been
        await asyncio.gather(first, second)
    finally:
        for engine in engines:
            await engine.dispose()
    assert served == ["first", "second"]


async def test_a_waiter_whose_caller_was_answered_stops_waiting_and_never_holds_the_entity(settings):
    one, two = async_engine(settings.database), async_engine(settings.database)
    answered, reached = asyncio.Event(), []
    try:
        async with held(one, [KEY]):

            async def waiter() -> None:
                async with held(two, [KEY], gave_up=answered.is_set):
                    reached.append(True)

            waiting = asyncio.ensure_future(waiter())
            await asyncio.sleep(0.5)
            answered.set()
            with pytest.raises(GaveUp):
                await asyncio.wait_for(waiting, 5)  # within a slice of the queue, with the entity still held
        assert not reached
        async with held(two, [KEY]):  # and nothing of it is left holding the key
            pass
    finally:
        await one.dispose()
        await two.dispose()


@pytest.mark.parametrize("lock", [held, shared], ids=["exclusive", "shared"])
async def test_a_write_whose_connection_postgres_ends_under_its_lock_fails_with_that_error(settings, lock):
    # before: letting go of the lock on the broken connection raised PendingRollbackError instead, which no
    # table maps (callers were told INTERNAL while Postgres restarted)
    from sqlalchemy.exc import OperationalError

    engine, admin = async_engine(settings.database), async_engine(settings.database)
    try:
        with pytest.raises(OperationalError):
            async with lock(engine, [KEY] if lock is held else KEY) as conn:
                pid = await conn.scalar(text("SELECT pg_backend_pid()"))
                async with admin.connect() as other:  # as a Postgres restart ends every backend
                    await other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
                await conn.execute(text("SELECT 1"))
        async with asyncio.timeout(5), held(engine, [KEY]):  # the lock ended with its session
            pass
    finally:
        await engine.dispose()
        await admin.dispose()
