"""A write's commit that the broker takes but answers late: the write is not refused while it may be committed.

The broker is frozen (SIGSTOP) after every record of the write was acknowledged and just before the commit
is sent: the commit waits in the broker's socket until it thaws. Refusing the write then (UNAVAILABLE,
"nothing written") would be a lie, and a client's retry would write it twice.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from services.bus import producer as producer_module
from services.bus.producer import AppendFailed, AppendUnresolved, EventLog
from services.bus.topics import DIRECTORY
from services.events import ProducerInfo, WorkspaceCreated
from tests.support.log import read_events

P = ProducerInfo(component="test", version="0")


@pytest.fixture
def frozen_at_commit(infra, monkeypatch):
    """Make the log's producers freeze the broker for `seconds` at the first commit after `arm(seconds)`."""
    if infra.kafka is None:
        pytest.skip("needs the local broker, whose process the test can stop")
    armed: list[float] = []
    thaw: list[threading.Timer] = []

    class FreezingAtCommit(Producer):
        def commit_transaction(self, *args):
            if armed:
                # every record acknowledged, so what reaches the broker next is the commit. A loaded CI
                # machine has taken more than 10 s for this first delivery: wait for it, or fail plainly
                if self.flush(120) > 0:
                    pytest.fail("the broker did not acknowledge the write's records within 120 s")
                freeze(infra.kafka.pid)
                thaw.append(threading.Timer(armed.pop(), os.kill, (infra.kafka.pid, signal.SIGCONT)))
                thaw[-1].start()
            return super().commit_transaction(*args)

    monkeypatch.setattr(producer_module, "Producer", FreezingAtCommit)
    yield armed.append
    for timer in thaw:
        timer.join()
    os.kill(infra.kafka.pid, signal.SIGCONT)


def freeze(pid: int, timeout: float = 30.0) -> None:
    """SIGSTOP `pid` and return once every one of its threads is stopped.

    kill() returns before the process stops: a thread keeps running until it next checks for signals, and
    on a loaded machine the broker once answered the commit in 5 ms after the signal was sent."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not all(_stopped(task) for task in Path(f"/proc/{pid}/task").iterdir()):
        if time.monotonic() > deadline:
            pytest.fail(f"the broker (pid {pid}) did not stop within {timeout:.0f} s of SIGSTOP")
        time.sleep(0.001)


def _stopped(task: Path) -> bool:
    try:
        stat = (task / "stat").read_text()
    except FileNotFoundError:  # the thread ended
        return True
    return stat[stat.rindex(")") + 2] in "tT"


def event_log(settings, **kafka) -> EventLog:
    log = EventLog(settings.kafka.model_copy(update={"producer_pool_size": 1, **kafka}))
    log.start()
    return log


def append_once_thawed(log: EventLog, event) -> None:
    """Append `event` after the broker was frozen: a write refused as not written (AppendFailed) is tried
    again, as a client would. A broker just thawed on a loaded machine has taken more than the tests' 1 s
    write timeout to take the next record; a refused write left nothing behind (`created` counts it)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return log.append_sync([event])
        except AppendFailed:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def created(settings, workspace_ids: list[str]) -> list[str]:
    events = read_events(
        settings,
        DIRECTORY,
        lambda got: {e.workspace_id for e in got} >= set(workspace_ids),
        timeout=60,
        settle=3.0,
    )
    return [e.workspace_id for e in events if isinstance(e, WorkspaceCreated)]


def test_a_commit_answered_after_the_write_timeout_is_acknowledged_once_not_refused(settings, frozen_at_commit):
    log = event_log(settings, append_timeout_s=1.0)
    try:
        frozen_at_commit(5.0)
        started = time.monotonic()
        token = log.append_sync([WorkspaceCreated(workspace_id="late", producer=P)])
        waited = time.monotonic() - started
        append_once_thawed(log, WorkspaceCreated(workspace_id="next", producer=P))
    finally:
        log.close()
    assert token.offsets, "the write was acknowledged with its position"
    assert waited > 4.0, "it waited for the broker's answer rather than guessing"
    assert sorted(created(settings, ["late", "next"])) == ["late", "next"]


def test_a_commit_left_unanswered_past_the_transaction_timeout_is_never_refused_nor_written_twice(
    settings, frozen_at_commit
):
    log = event_log(settings, append_timeout_s=1.0, transaction_timeout_ms=3_000)
    try:
        frozen_at_commit(6.0)
        # Usually each commit call gives up after append_timeout_s and, past the transaction timeout,
        # the write is reported as possibly written. But librdkafka does not always bound a call that
        # waits on the coordinator (librdkafka issue 5456), and once thawed the broker may commit the
        # transaction before it aborts expired ones: then the call returns with the write committed.
        # Either way the write is not refused, and is on the log at most once (once if acknowledged).
        try:
            log.append_sync([WorkspaceCreated(workspace_id="unknown", producer=P)])
            acknowledged = True
        except AppendUnresolved as exc:
            assert "may have been" in str(exc)
            acknowledged = False
        append_once_thawed(log, WorkspaceCreated(workspace_id="next", producer=P))  # the slot works again
    finally:
        log.close()
    written = created(settings, ["next", "unknown"] if acknowledged else ["next"]).count("unknown")
    assert written == 1 if acknowledged else written <= 1


@pytest.fixture
def reply_lost_once(monkeypatch):
    """Make the log's producers commit the next transaction after `arm()` but answer its first commit call
    with a retriable transport error, as librdkafka does when the broker goes away after taking the commit;
    the client's queue then holds the disconnect's error events, which `len(producer)` counts."""
    armed: list[int] = []

    class ReplyLostOnce(Producer):
        lost = False  # the log took this producer's commit and its answer was dropped

        def commit_transaction(self, *args):
            if self.lost:  # asked again: the transaction is committed
                self.lost = False
                return None
            if not armed:
                return super().commit_transaction(*args)
            armed.clear()
            super().commit_transaction(*args)
            self.lost = True
            raise KafkaException(
                KafkaError(KafkaError._TRANSPORT, "Failed to end transaction: Disconnected", retriable=True)
            )

        def __len__(self):
            return super().__len__() + 3  # the disconnect's error events

    monkeypatch.setattr(producer_module, "Producer", ReplyLostOnce)
    return lambda: armed.append(1)


def test_a_commit_whose_answer_was_lost_after_the_log_took_it_is_acknowledged_not_refused(settings, reply_lost_once):
    # refused as "nothing written" (AppendFailed), its client's retry wrote it twice
    log = event_log(settings)
    try:
        reply_lost_once()
        token = log.append_sync([WorkspaceCreated(workspace_id="taken", producer=P)])
        log.append_sync([WorkspaceCreated(workspace_id="next", producer=P)])
    finally:
        log.close()
    assert token.offsets
    assert created(settings, ["taken", "next"]).count("taken") == 1


@pytest.fixture
def queue_full_once(monkeypatch):
    """Make the log's producers raise BufferError, as librdkafka does when its queue is full, at the second
    record of the next write after `arm()`: its first record is then in an open transaction."""
    armed: list[int] = []

    class FullAtSecondRecord(Producer):
        def produce(self, *args, **kwargs):
            if armed:
                armed[0] += 1
                if armed[0] == 2:
                    armed.clear()
                    raise BufferError("Local: Queue full")
            return super().produce(*args, **kwargs)

    monkeypatch.setattr(producer_module, "Producer", FullAtSecondRecord)
    return lambda: armed.append(0)


def test_a_write_the_client_library_refuses_mid_transaction_is_refused_whole_and_the_next_write_goes_through(
    settings, queue_full_once
):
    log = event_log(settings, append_timeout_s=10.0)  # one slot: the next write uses the failed one's producer
    try:
        queue_full_once()
        with pytest.raises(AppendFailed, match="BufferError"):
            log.append_sync([WorkspaceCreated(workspace_id=w, producer=P) for w in ("full-1", "full-2")])
        started = time.monotonic()
        log.append_sync([WorkspaceCreated(workspace_id="after", producer=P)])
        assert time.monotonic() - started < 5.0, "the slot wrote at once, not after the broker timed out a transaction"
    finally:
        log.close()
    # read_committed: "after" is readable, and nothing of the refused write ever is
    assert created(settings, ["after"]) == ["after"]
