"""An API process serves a bounded number of Subscribe streams, and of one workspace's: each holds a Kafka
consumer and a thread."""

from __future__ import annotations

import grpc
import pytest

from services.api.errors import status_for
from services.api.subscriptions import Streams
from services.errors import ResourceExhausted


def test_a_stream_past_the_limit_is_resource_exhausted_and_a_closed_one_frees_its_place():
    streams = Streams(2, 2)
    with streams.one("a"), streams.one("b"):
        with pytest.raises(ResourceExhausted, match="already serves 2 Subscribe streams") as refused:
            with streams.one("c"):
                pass
        assert status_for(refused.value) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "PEERLOG_API_MAX_SUBSCRIPTIONS" in str(refused.value)
    with streams.one("c"):  # both closed: room again
        assert streams.all.total() == 1
    assert streams.all.total() == 0


def test_one_workspace_past_its_own_limit_is_refused_while_another_still_gets_a_stream():
    streams = Streams(3, 2)
    with streams.one("a"), streams.one("a"):
        with pytest.raises(ResourceExhausted, match="workspace 'a' already has 2") as refused:
            with streams.one("a"):
                pass
        assert "PEERLOG_API_MAX_SUBSCRIPTIONS_PER_WORKSPACE" in str(refused.value)
        with streams.one("b"):
            assert streams.all.total() == 3
    with streams.one("a"):  # its streams closed: room again, and no count kept for a workspace with none
        assert streams.of_workspace.held == {"a": 1}
    assert not streams.of_workspace.held


def test_a_stream_that_fails_gives_its_place_back():
    streams = Streams(1, 1)
    with pytest.raises(RuntimeError), streams.one("a"):
        raise RuntimeError("the consumer failed")
    with streams.one("a"):
        pass
