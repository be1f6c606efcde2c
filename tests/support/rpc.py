"""Assertions about gRPC calls."""

from __future__ import annotations

import asyncio

import grpc
import pytest


async def rejected(call, code: grpc.StatusCode, *phrases: str) -> None:
    """The call fails with `code`, and its details contain every phrase."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, err.value.details()
    for phrase in phrases:
        assert phrase in err.value.details(), err.value.details()


async def waiting_behind(projector, first, second, *phrases: str):
    """With the projector stopped: `first()` (a write) answers UNAVAILABLE with every phrase (on the log, not
    readable), and `second()` (a write of the same entity, often on another server), sent after it, still
    waits a second later for the first to be readable. The projector is back on return; so is `second`,
    running. Both are functions making the call: a gRPC call starts once made, so `second` made beside
    `first` raced it for the entity's lock, and when it won, `first` waited for it instead."""
    projector.stop()
    try:
        await rejected(first(), grpc.StatusCode.UNAVAILABLE, *phrases)
        waiting = asyncio.ensure_future(second())
        await asyncio.sleep(1.0)
        assert not waiting.done()  # the entity stays locked until the first write is readable
    finally:
        projector.start()
    return waiting
