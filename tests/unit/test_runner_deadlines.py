"""The runner's own deadline on blocking Kafka calls: a call that never returns ends the incarnation."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import pytest

from services.bus.runner import TransactionFailed, _bounded


async def test_a_call_stuck_past_its_deadline_fails_the_transaction_and_is_left_in_a_daemon_thread():
    release = threading.Event()

    def send_offsets_to_transaction():
        release.wait()

    started = time.monotonic()
    with pytest.raises(TransactionFailed, match="send_offsets_to_transaction did not return within 0 s"):
        await _bounded(send_offsets_to_transaction, seconds=0.2)
    assert time.monotonic() - started < 2
    stuck = [t for t in threading.enumerate() if t.name == "kafka-send_offsets_to_transaction"]
    assert stuck and all(t.daemon for t in stuck)  # cannot hold up the worker's exit
    release.set()


async def test_a_call_that_returns_or_raises_in_time_is_passed_through():
    assert await _bounded(lambda x: x + 1, 41, seconds=5) == 42

    def refuses():
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        await _bounded(refuses, seconds=5)


async def test_a_side_append_that_fails_in_a_broker_outage_ends_the_incarnation_not_the_worker():
    from services.bus.producer import AppendFailed
    from services.bus.runner import Runner, Step
    from services.bus.settings import KafkaSettings
    from services.events import ProducerInfo, WorkspaceCreated, encode

    class EmitsIntoAnOutage:
        name, inputs, max_batch = "deriver", (), 1

        async def handle(self, get, event) -> Step:
            raise AppendFailed("side events were not acknowledged within 30 s")

    class Record:
        def key(self):
            return b"w"

        def value(self):
            return encode(WorkspaceCreated(workspace_id="w", producer=ProducerInfo(component="t", version="0")))

        def partition(self):
            return 0

        def headers(self):
            return None

    runner = Runner(KafkaSettings(), "app", EmitsIntoAnOutage())
    # TransactionFailed: the run loop starts a new incarnation from the committed offsets
    with pytest.raises(TransactionFailed, match="a side append failed"):
        await runner._transact([Record()])


async def test_a_call_that_fails_after_its_deadline_leaves_no_unread_error_behind(caplog):
    release = threading.Event()

    def send_offsets_to_transaction():
        release.wait()
        raise RuntimeError("the broker went away")

    with pytest.raises(TransactionFailed):
        await _bounded(send_offsets_to_transaction, seconds=0.1)
    release.set()
    await asyncio.sleep(0.2)  # the thread's error reaches the future
    gc.collect()  # asyncio reports an unread error when the future is collected
    assert "exception was never retrieved" not in caplog.text
