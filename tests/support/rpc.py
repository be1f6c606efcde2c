"""Assertions about gRPC calls."""

from __future__ import annotations

import grpc
import pytest


async def rejected(call, code: grpc.StatusCode, *phrases: str) -> None:
    """The call fails with `code`, and its details contain every phrase."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, err.value.details()
    for phrase in phrases:
        assert phrase in err.value.details(), err.value.details()
