"""An API process serves a bounded number of Subscribe streams: each holds a Kafka consumer and a thread."""

from __future__ import annotations

import grpc
import pytest

from services.api.errors import status_for
from services.api.subscriptions import Streams
from services.errors import ResourceExhausted


def test_a_stream_past_the_limit_is_resource_exhausted_and_a_closed_one_frees_its_place():
    streams = Streams(2)
    with streams.one(), streams.one():
        with pytest.raises(ResourceExhausted, match="already serves 2 Subscribe streams") as refused:
            with streams.one():
                pass
        assert status_for(refused.value) == grpc.StatusCode.RESOURCE_EXHAUSTED
    with streams.one():  # both closed: room again
        assert streams.open == 1
    assert streams.open == 0


def test_a_stream_that_fails_gives_its_place_back():
    streams = Streams(1)
    with pytest.raises(RuntimeError), streams.one():
        raise RuntimeError("the consumer failed")
    with streams.one():
        pass
