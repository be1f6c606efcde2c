from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(check: Callable[[], object], timeout: float = 20.0, every: float = 0.05):
    """Poll `check` until it returns something truthy; fail with its last value after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value: {value!r})")
        time.sleep(every)


async def until(read: Callable[[], Awaitable[T]], ok: Callable[[T], object], timeout: float = 60.0) -> T:
    """Await `read()` until `ok(value)`; fail with the last value after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = await read()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value: {value!r})")
        await asyncio.sleep(0.1)


async def until_true(condition: Callable[[], object], timeout: float = 30.0) -> None:
    """Let the event loop run until `condition()` holds; TimeoutError after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.1)


def every_write(*tokens: str) -> str:
    """One consistency token that waits for all these writes: their sessions may sit on different partitions,
    and a token waits only on the partitions it names."""
    from services.bus.consistency import ConsistencyToken

    merged = ConsistencyToken.decode(tokens[0])
    for token in tokens[1:]:
        merged = merged.merge(ConsistencyToken.decode(token))
    return merged.encode()
