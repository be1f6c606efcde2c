"""Writes that queue while the log's producers are busy are committed together (group commit): each is
still all or none, and each caller gets the positions of its own events only."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer

from services.bus import producer as producer_module
from services.bus.producer import AppendFailed, EventLog
from services.bus.topics import DIRECTORY
from services.events import PeerCreated, ProducerInfo, WorkspaceCreated
from tests.support.log import read_events

P = ProducerInfo(component="test", version="0")


@dataclass
class HeldLog:
    """A log of one producer whose transactions wait at begin until `release` is set."""

    log: EventLog
    release: threading.Event
    held: threading.Event
    commits: list  # one entry per transaction committed

    def hold(self, future: Future) -> Future:
        """`future` once its write is held at begin, its group formed."""
        assert self.held.wait(60), "the write did not reach its transaction"
        return future


@pytest.fixture
def held(settings, monkeypatch) -> Iterator[HeldLog]:
    release, held, commits = threading.Event(), threading.Event(), []

    class HeldAtBegin(Producer):
        def begin_transaction(self, *args):
            held.set()
            release.wait(60)
            return super().begin_transaction(*args)

        def commit_transaction(self, *args):
            outcome = super().commit_transaction(*args)
            commits.append(1)
            return outcome

    monkeypatch.setattr(producer_module, "Producer", HeldAtBegin)
    log = one_producer_log(settings)
    try:
        yield HeldLog(log, release, held, commits)
    finally:
        release.set()
        log.close()


def one_producer_log(settings) -> EventLog:
    log = EventLog(settings.kafka.model_copy(update={"producer_pool_size": 1}))
    log.start()
    return log


def peers(workspace_id: str, count: int) -> list[PeerCreated]:
    return [PeerCreated(workspace_id=workspace_id, peer_id=f"p{i}", producer=P) for i in range(count)]


def test_writes_queued_behind_a_busy_producer_are_committed_in_one_transaction_each_with_its_own_positions(
    settings, held
):
    first = held.hold(held.log.submit([WorkspaceCreated(workspace_id="g0", producer=P)]))
    queued = [
        held.log.submit([WorkspaceCreated(workspace_id=f"g{i}", producer=P), *peers(f"g{i}", i)]) for i in (1, 2, 3)
    ]
    held.release.set()
    tokens = [future.result(60) for future in (first, *queued)]
    assert len(held.commits) == 2, "the three writes that queued went in one transaction after the first"
    events = read_events(settings, DIRECTORY, lambda got: len(got) >= 10, timeout=60, settle=2.0)
    assert len(events) == len({e.event_id for e in events}) == 10, "every event is on the log once"
    # a write's events share its workspace's partition: its token is the offset of its last event there,
    # which no other write of the same transaction can have
    assert [len(t.offsets) for t in tokens] == [1, 1, 1, 1]
    assert len({t.encode() for t in tokens}) == 4, "each write got its own positions, not the transaction's"


def test_a_write_that_cannot_be_encoded_fails_alone_and_the_writes_grouped_with_it_are_committed(settings, held):
    first = held.hold(held.log.submit([WorkspaceCreated(workspace_id="e0", producer=P)]))
    good = held.log.submit([WorkspaceCreated(workspace_id="e1", producer=P)])
    bad = held.log.submit([WorkspaceCreated(workspace_id="e2", metadata={"not json": object()}, producer=P)])
    also_good = held.log.submit([WorkspaceCreated(workspace_id="e3", producer=P)])
    held.release.set()
    for future in (first, good, also_good):
        assert future.result(60).offsets
    with pytest.raises(AppendFailed, match="could not be encoded"):
        bad.result(60)
    events = read_events(settings, DIRECTORY, lambda got: len(got) >= 3, timeout=60, settle=2.0)
    assert sorted(e.workspace_id for e in events) == ["e0", "e1", "e3"]


def test_a_write_after_close_is_refused_not_left_waiting(settings):
    log = one_producer_log(settings)
    log.close()
    with pytest.raises(AppendFailed, match="not started, or closed"):
        log.append_sync([WorkspaceCreated(workspace_id="late", producer=P)])
