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

    class EmitsIntoAnOutage:
        name, inputs, max_batch = "deriver", (), 1

        async def handle(self, get, event) -> Step:
            raise AppendFailed("side events were not acknowledged within 30 s")

    runner = Runner(KafkaSettings(), "app", EmitsIntoAnOutage())
    # TransactionFailed: the run loop starts a new incarnation from the committed offsets
    with pytest.raises(TransactionFailed, match="a side append failed"):
        await runner._transact([_Keyed(b"w")])


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


class _Keyed:
    """A record of `key` at `offset` of t.directory[0] holding a WorkspaceCreated, or the bytes `raw`."""

    def __init__(self, key: bytes, raw: bytes | None = None, offset: int = 0) -> None:
        self._key, self._raw, self._offset = key, raw, offset

    def key(self):
        return self._key

    def value(self):
        from services.events import ProducerInfo, WorkspaceCreated, encode

        if self._raw is not None:
            return self._raw
        return encode(
            WorkspaceCreated(workspace_id=self._key.decode(), producer=ProducerInfo(component="t", version="0"))
        )

    def partition(self):
        return 0

    def topic(self):
        return "t.directory"

    def offset(self):
        return self._offset

    def headers(self):
        return None


async def test_a_key_that_fails_cancels_the_batchs_other_keys_before_the_incarnation_ends():
    from services.bus.producer import AppendFailed
    from services.bus.runner import Runner, Step
    from services.bus.settings import KafkaSettings

    finished: list[str] = []

    class OneKeyFails:
        name, inputs, max_batch = "deriver", (), 2

        async def handle(self, get, event) -> Step:
            if event.workspace_id == "a":
                raise AppendFailed("side events were not acknowledged within 30 s")
            await asyncio.sleep(0.3)  # a model call
            finished.append(event.workspace_id)
            return Step()

    runner = Runner(KafkaSettings(), "app", OneKeyFails())
    with pytest.raises(TransactionFailed):
        await runner._transact([_Keyed(b"a"), _Keyed(b"b")])
    await asyncio.sleep(0.6)
    # left running, b's handler finished after the next incarnation had restored its states, over them
    assert finished == []


async def test_a_clock_tick_the_log_refuses_is_skipped_not_the_end_of_the_worker():
    from services.bus.producer import AppendFailed
    from services.bus.runner import Runner
    from services.bus.settings import KafkaSettings

    async def tick(states):
        raise AppendFailed("side events were not acknowledged within 30 s")

    class Idle:
        name, inputs, max_batch = "dream-scheduler", (), 1

    runner = Runner(KafkaSettings(), "app", Idle(), tick=tick)
    await runner._ticked()  # raised, it ended the runner's task and the worker with it


def test_an_input_event_newer_than_this_code_stops_the_processor_naming_where_it_is():
    import orjson

    from services.bus.streams import NewerThanThisCode, read_input

    newer = orjson.loads(_Keyed(b"w").value())
    newer["schema_version"] = 99
    with pytest.raises(NewerThanThisCode, match="t.directory\\[0\\]@7 holds an event this worker cannot read.*upgrade"):
        read_input(_Keyed(b"w", orjson.dumps(newer), 7))
    renamed = {**orjson.loads(_Keyed(b"w").value()), "type": "WorkspaceTeleported"}
    with pytest.raises(NewerThanThisCode):
        read_input(_Keyed(b"w", orjson.dumps(renamed), 8))
    assert read_input(_Keyed(b"w", b"\x00 not json", 9)) is None  # damaged bytes: skipped, as before
    damaged = {**orjson.loads(_Keyed(b"w").value()), "schema_version": "2"}
    assert read_input(_Keyed(b"w", orjson.dumps(damaged), 10)) is None  # no version number: damaged, not newer
