"""A processor's runner that joins its group, opens a transaction on its changelog and input offsets, and
then waits to be SIGKILLed: what a worker killed between producing a batch and committing it leaves.

    python -m tests.support.dead_runner MEMBER   (settings from PEERLOG_* in the environment)

Prints "open <partitions>" once the transaction is open."""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from services.bus.runner import Runner, Step
from services.bus.topics import SESSIONS
from services.settings import Settings


class Idle:
    """A processor that decides nothing: the tests that use it look at the runner's restore alone."""

    name = "idle"
    inputs = (SESSIONS,)
    max_batch = 10

    async def handle(self, get, event) -> Step:
        return Step()


def runner(settings: Settings, member: str = "") -> Runner:
    return Runner(settings.kafka, settings.worker.app_id_for(settings.kafka.topic_prefix), Idle(), member=member)


def main(member: str) -> None:
    settings = Settings()
    dying = runner(settings, member)
    consumer = Consumer(dying._consumer_config())
    consumer.subscribe([SESSIONS.full_name(settings.kafka.topic_prefix)])
    while not consumer.assignment():
        consumer.poll(0.1)
    producer = Producer(dying._producer_config())
    producer.init_transactions(30)
    producer.begin_transaction()
    numbers = sorted(tp.partition for tp in consumer.assignment())
    for p in numbers:
        producer.produce(dying.changelog_topic, key=f"k{p}".encode(), value=b'{"by": "the dead"}', partition=p)
    offsets = [TopicPartition(tp.topic, tp.partition, 0) for tp in consumer.assignment()]
    producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
    producer.flush(30)
    print("open", *numbers, flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1])
