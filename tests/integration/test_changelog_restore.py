"""What a runner restores on a new assignment: the state its changelog holds once every transaction on it
has ended, not the state in front of a dead owner's open transaction."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from services.bus.admin import create_topics
from services.bus.streams import open_transactions
from services.bus.topics import SESSIONS
from tests.support.dead_runner import runner as idle_runner
from tests.support.processes import first_line_then_kill


def transactional(settings, name: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": settings.kafka.bootstrap_servers, "transactional.id": f"{name}-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    return producer


def test_a_new_owner_restores_what_was_committed_behind_a_dead_owners_open_transaction(settings):
    runner = idle_runner(settings)
    create_topics(settings.kafka, (runner.changelog,))
    # a worker killed between producing its batch and committing it: its transaction stays open
    dead = transactional(settings, "dead")
    dead.produce(runner.changelog_topic, key=b"pair", value=orjson.dumps({"pending": ["m1"]}), partition=0)
    dead.flush(10)
    # the next owner went on and committed the pair's later state (then died too, say)
    between = transactional(settings, "between")
    between.produce(runner.changelog_topic, key=b"pair", value=orjson.dumps({"pending": ["m1", "m2"]}), partition=0)
    between.commit_transaction(30)
    assert open_transactions(settings.kafka, runner.changelog_topic, [0, 1]) == [0]
    # what the broker does transaction.timeout.ms after the dead transaction began
    abort_began: list[float] = []  # noted before the call: the log may show the abort before the call returns
    threading.Timer(3.0, lambda: (abort_began.append(time.monotonic()), dead.abort_transaction(30))).start()

    consumer = Consumer(runner._consumer_config())
    try:
        runner._on_assign(consumer, [TopicPartition(SESSIONS.full_name(settings.kafka.topic_prefix), 0)])
    finally:
        consumer.close()
    assert runner.states.get("pair") == {"pending": ["m1", "m2"]}, "the state the owner in between committed"
    assert abort_began and time.monotonic() >= abort_began[0], "the restore waited for the open transaction"
    assert open_transactions(settings.kafka, runner.changelog_topic, [0, 1]) == []


def test_an_assignment_with_no_open_transaction_restores_without_waiting(settings):
    runner = idle_runner(settings)
    create_topics(settings.kafka, (runner.changelog,))
    owner = transactional(settings, "owner")
    owner.produce(runner.changelog_topic, key=b"pair", value=orjson.dumps({"pending": ["m1"]}), partition=1)
    owner.produce(runner.changelog_topic, key=b"gone", value=orjson.dumps({"pending": []}), partition=1)
    owner.produce(runner.changelog_topic, key=b"gone", value=None, partition=1)
    owner.commit_transaction(30)

    consumer = Consumer(runner._consumer_config())
    started = time.monotonic()
    try:
        runner._on_assign(consumer, [TopicPartition(SESSIONS.full_name(settings.kafka.topic_prefix), 1)])
    finally:
        consumer.close()
    assert time.monotonic() - started < 10
    assert runner.states == {"pair": {"pending": ["m1"]}}
    assert runner.partition_of == {"pair": 1}


def test_a_worker_started_again_under_its_instance_id_resumes_at_once_after_a_kill(settings):
    """The dead process's transaction (state changes and input offsets) is aborted by its successor's first
    step, and its partitions come back to the successor without a rebalance. Under a new identity the
    successor waited for the group to expire the dead member (10 s) and for the broker to abort the
    transaction (transaction.timeout.ms, 60 s)."""
    member = "worker-a.1"
    probe = idle_runner(settings, member)
    create_topics(settings.kafka, (probe.changelog,))
    before = transactional(settings, "before")  # what earlier owners committed on every partition
    for p in range(settings.kafka.partitions):
        before.produce(probe.changelog_topic, key=f"k{p}".encode(), value=orjson.dumps({"by": "before"}), partition=p)
    before.commit_transaction(30)
    assert first_line_then_kill(settings, "tests.support.dead_runner", member).split() == ["open", "0", "1", "2"]
    assert open_transactions(settings.kafka, probe.changelog_topic, [0, 1, 2]) == [0, 1, 2]

    started = time.monotonic()
    restored = asyncio.run(_restored_by(idle_runner(settings, member), keys={"k0", "k1", "k2"}, within_s=40))
    took = time.monotonic() - started
    assert restored == {f"k{p}": {"by": "before"} for p in range(3)}, "the dead transaction's state is not seen"
    assert took < 9, f"resumed {took:.1f} s after the kill"
    assert open_transactions(settings.kafka, probe.changelog_topic, [0, 1, 2]) == []


async def _restored_by(runner, keys: set[str], within_s: float) -> dict:
    """Run `runner` until it holds state for `keys` (restored from the changelog on its assignment)."""
    task = asyncio.create_task(runner.run())
    deadline = time.monotonic() + within_s
    try:
        while not keys <= runner.states.keys() and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.05)
        return dict(runner.states)
    finally:
        runner.stop()
        await task
