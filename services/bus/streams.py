"""Reading log records: as events inside a processor, and whole partitions up to their end."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from services.bus.settings import KafkaSettings
from services.events import Event, EventDecodeError, decode

log = logging.getLogger(__name__)


def read(raw: bytes) -> Event | None:
    """Decode a record. An unreadable one is logged and skipped, as the projector quarantines it:
    stopping would hold up every other key on the partition behind one bad record."""
    try:
        return decode(raw)
    except EventDecodeError as exc:
        log.error("skipping unreadable record: %s", exc)
        return None


def to_the_end(
    kafka: KafkaSettings, topic: str, partitions: Iterable[int] | None = None, timeout: float = 120.0
) -> Iterator[Message]:
    """Every committed record of `topic` (or of some of its partitions) from the start to the end as the
    read reaches it. Ends at end-of-partition events: watermarks also count transaction markers."""
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": f"scan-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        if partitions is None:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        remaining = set(partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in remaining])
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not read {topic} to its end within {timeout:.0f} s")
            for msg in consumer.consume(1000, 0.2):
                if msg.error() is None:
                    yield msg
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    remaining.discard(msg.partition())
    finally:
        consumer.close()
