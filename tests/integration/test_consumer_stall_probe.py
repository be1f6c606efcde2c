"""The runner's stall probe against a real broker: what counts as records waiting for a consumer."""

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from services.bus.stall import probe


def _consumer(settings, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": settings.kafka.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )


def _committed_records(settings, topic: str, n: int) -> None:
    producer = Producer(
        {"bootstrap.servers": settings.kafka.bootstrap_servers, "transactional.id": f"probe-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(n):
        producer.produce(topic, value=str(i).encode(), partition=0)
    producer.commit_transaction(30)


def _consume_all(consumer: Consumer, n: int) -> None:
    got, deadline = 0, time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(100, 0.5) if m.error() is None)
    assert got == n


def test_records_not_delivered_count_as_waiting_and_an_open_transactions_records_do_not(settings):
    topic = f"{settings.kafka.topic_prefix}sessions"
    _committed_records(settings, topic, 5)
    consumer = _consumer(settings, f"probe-{uuid.uuid4().hex}")
    try:
        consumer.assign([TopicPartition(topic, 0)])
        waiting = probe(consumer)  # nothing consumed, nothing committed: all five wait
        assert waiting == [f"{topic}[0] at 0 of 6"]  # five records and the commit marker
        _consume_all(consumer, 5)
        assert probe(consumer) == []
        # a transaction left open holds the end (the last stable offset) where it was
        open_txn = Producer(
            {
                "bootstrap.servers": settings.kafka.bootstrap_servers,
                "transactional.id": f"probe-open-{uuid.uuid4().hex}",
            }
        )
        open_txn.init_transactions(30)
        open_txn.begin_transaction()
        for i in range(3):
            open_txn.produce(topic, value=b"pending", partition=0)
        open_txn.flush(30)
        assert probe(consumer) == []
        open_txn.abort_transaction(30)
    finally:
        consumer.close()


def test_a_committed_offset_is_where_a_consumer_that_consumed_nothing_stands(settings):
    topic = f"{settings.kafka.topic_prefix}sessions"
    _committed_records(settings, topic, 4)
    group = f"probe-{uuid.uuid4().hex}"
    first = _consumer(settings, group)
    first.assign([TopicPartition(topic, 0)])
    _consume_all(first, 4)
    first.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)  # past the marker: caught up
    first.close()
    second = _consumer(settings, group)
    try:
        second.assign([TopicPartition(topic, 0)])
        assert probe(second) == []
        second.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        assert probe(second) == [f"{topic}[0] at 2 of 5"]
    finally:
        second.close()
