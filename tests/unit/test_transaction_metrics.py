"""The runner counts its Kafka transactions: commits, and aborts of begun ones (not a failure before any began)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from prometheus_client import REGISTRY

from services.bus.runner import Runner, Step, TransactionFailed
from services.bus.settings import KafkaSettings
from services.events import ProducerInfo, WorkspaceCreated, encode

EVENT = WorkspaceCreated(workspace_id="w", producer=ProducerInfo(component="t", version="0"))


class Record:
    def key(self):
        return b"w"

    def value(self):
        return encode(EVENT)

    def partition(self):
        return 0

    def topic(self):
        return "in"

    def offset(self):
        return 7

    def headers(self):
        return None


class Producer:
    def __init__(self, refuse_commit: bool) -> None:
        self.refuse_commit = refuse_commit

    def begin_transaction(self):
        pass

    def produce(self, **record):
        pass

    def send_offsets_to_transaction(self, offsets, meta, timeout):
        pass

    def commit_transaction(self, timeout):
        if self.refuse_commit:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))


class Consumer:
    def consumer_group_metadata(self):
        return None


class Echo:
    inputs, max_batch = (), 1

    def __init__(self, name: str, fails: bool = False) -> None:
        self.name, self.fails = name, fails

    async def handle(self, get, event) -> Step:
        if self.fails:
            raise RuntimeError("a processor bug")
        return Step(events=[event])


def _count(name: str, component: str) -> float:
    return REGISTRY.get_sample_value(name, {"component": component})


def _runner(processor: Echo, refuse_commit: bool = False) -> Runner:
    runner = Runner(KafkaSettings(), "app", processor)
    runner.producer, runner.consumer = Producer(refuse_commit), Consumer()
    return runner


async def test_a_committed_batch_counts_a_commit_and_its_records():
    runner = _runner(Echo("metrics-ok"))
    await runner._transact([Record(), Record()])
    assert _count("peerlog_kafka_transactions_committed_total", "metrics-ok") == 1
    assert _count("peerlog_kafka_transaction_aborts_total", "metrics-ok") == 0
    assert REGISTRY.get_sample_value("peerlog_processor_events_total", {"processor": "metrics-ok"}) == 2


async def test_a_commit_the_log_refuses_counts_an_abort():
    runner = _runner(Echo("metrics-refused"), refuse_commit=True)
    with pytest.raises(TransactionFailed):
        await runner._transact([Record()])
    assert _count("peerlog_kafka_transaction_aborts_total", "metrics-refused") == 1
    assert _count("peerlog_kafka_transactions_committed_total", "metrics-refused") == 0


async def test_a_processor_failure_before_the_transaction_began_aborts_nothing():
    runner = _runner(Echo("metrics-bug", fails=True))
    with pytest.raises(RuntimeError):
        await runner._transact([Record()])
    assert _count("peerlog_kafka_transaction_aborts_total", "metrics-bug") == 0
