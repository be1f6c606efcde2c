"""Reading one workspace's events off every log topic from a cursor, for outside consumers (Subscribe,
webhooks). A cursor is the next offset to read per (topic, partition); it advances past every record
handled, delivered or filtered out, so resuming from a delivered event's cursor misses nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, Message, TopicPartition

from services.bus.settings import KafkaSettings
from services.bus.streams import read
from services.bus.topics import ALL_TOPICS
from services.errors import InvalidArgument
from services.events import Event, event_types

Position = tuple[str, int]  # (full topic name, partition)
Cursor = Mapping[Position, int]  # the next offset to read


@dataclass(frozen=True)
class Delivered:
    """One event of the subscription, where it sits, and the cursor to resume after it."""

    event: Event
    topic: str
    partition: int
    offset: int
    cursor: dict[Position, int]


@dataclass(frozen=True)
class Filter:
    """Which records a subscription delivers: one workspace, and some event types (empty: all)."""

    workspace_id: str
    types: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted(self.types - event_types().keys())
        if unknown:
            raise InvalidArgument(f"unknown event types {unknown}; known: {sorted(event_types())}")

    def wants_key(self, key: bytes | None) -> bool:
        # every key starts with the workspace, and ids cannot hold '/': a cheap test before decoding
        if key is None:
            return False
        text = key.decode("utf-8", "replace")
        return text == self.workspace_id or text.startswith(self.workspace_id + "/")

    def wants(self, event: Event) -> bool:
        return event.workspace_id == self.workspace_id and (not self.types or event.type in self.types)


def log_topics(kafka: KafkaSettings) -> tuple[str, ...]:
    """Every log topic a subscription reads, by full name."""
    return tuple(spec.full_name(kafka.topic_prefix) for spec in ALL_TOPICS)


def check_cursor(cursor: Cursor, topics: Iterable[str]) -> None:
    """Refuse a cursor naming something other than a log topic's partition, or a negative offset."""
    known = set(topics)
    for (topic, partition), offset in cursor.items():
        if topic not in known:
            raise InvalidArgument(f"cursor names {topic!r}, which is not a log topic ({sorted(known)})")
        if partition < 0 or offset < 0:
            raise InvalidArgument(f"cursor position {topic}/{partition}@{offset} is negative")


class LogSubscription:
    """A consumer without a group (nothing committed on the broker: the cursor is the caller's) over
    every partition of every log topic, read_committed. Blocking: call it off the event loop."""

    def __init__(self, kafka: KafkaSettings, wanted: Filter, cursor: Cursor, from_end: bool = False) -> None:
        self.topics = log_topics(kafka)
        check_cursor(cursor, self.topics)
        self.filter = wanted
        self.cursor: dict[Position, int] = dict(cursor)
        self._from_end = from_end
        self._consumer = Consumer(
            {
                "bootstrap.servers": kafka.bootstrap_servers,
                "group.id": f"{kafka.topic_prefix}subscribe-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )

    def start(self) -> None:
        """Assign every partition at its cursor position (or the start, or the end)."""
        meta = self._consumer.list_topics(timeout=10).topics
        default = OFFSET_END if self._from_end else OFFSET_BEGINNING
        assignment = []
        for topic in self.topics:
            if topic not in meta:
                continue  # not created yet in this deployment: nothing to read there
            for partition in meta[topic].partitions:
                assignment.append(TopicPartition(topic, partition, self.cursor.get((topic, partition), default)))
        self._consumer.assign(assignment)

    def poll(self, timeout: float = 0.5, max_records: int = 500) -> list[Delivered]:
        """The wanted events among the next records, each with the cursor just past it."""
        delivered = []
        for msg in self._consumer.consume(max_records, timeout):
            if msg.error() is not None:
                continue  # transient broker errors: librdkafka retries by itself
            event = self._wanted(msg)
            self.cursor[(msg.topic(), msg.partition())] = msg.offset() + 1
            if event is not None:
                delivered.append(Delivered(event, msg.topic(), msg.partition(), msg.offset(), dict(self.cursor)))
        return delivered

    def _wanted(self, msg: Message) -> Event | None:
        if not self.filter.wants_key(msg.key()):
            return None
        event = read(msg.value())
        return event if event is not None and self.filter.wants(event) else None

    def close(self) -> None:
        self._consumer.close()
