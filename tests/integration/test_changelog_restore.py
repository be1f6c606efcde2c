"""What a runner restores on a new assignment: the state its changelog holds once every transaction on it
has ended, not the state in front of a dead owner's open transaction."""

from __future__ import annotations

import threading
import time
import uuid

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from services.bus.admin import create_topics
from services.bus.runner import Runner, Step
from services.bus.streams import open_transactions
from services.bus.topics import SESSIONS


class Idle:
    """A processor that decides nothing: these tests look at the runner's restore alone."""

    name = "idle"
    inputs = (SESSIONS,)
    max_batch = 10

    async def handle(self, get, event) -> Step:
        return Step()


def transactional(settings, name: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": settings.kafka.bootstrap_servers, "transactional.id": f"{name}-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    return producer


def test_a_new_owner_restores_what_was_committed_behind_a_dead_owners_open_transaction(settings):
    runner = Runner(settings.kafka, settings.worker.app_id_for(settings.kafka.topic_prefix), Idle())
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
    runner = Runner(settings.kafka, settings.worker.app_id_for(settings.kafka.topic_prefix), Idle())
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
