"""Reading one workspace's events off every log topic from a cursor, for outside consumers (Subscribe,
webhooks). A cursor is the next offset to read per (topic, partition), for every partition from the start;
it advances past every record handled, delivered or filtered out, so resuming from a delivered event's
cursor misses nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from services.bus.settings import KafkaSettings
from services.bus.streams import NewerThanThisCode, read_input
from services.bus.topics import ALL_TOPICS
from services.errors import FailedPrecondition, InvalidArgument, Unavailable
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

    def may_want(self, type_name: str) -> bool:
        """Whether an event of this type, read or not, could be among those the subscription takes."""
        return not self.types or type_name in self.types

    def wants(self, event: Event) -> bool:
        return event.workspace_id == self.workspace_id and self.may_want(event.type)


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


def check_partitions(cursor: Cursor, partitions: Iterable[Position]) -> None:
    """Refuse a cursor naming a partition the log topics do not have: no stream of this log gave it."""
    existing = set(partitions)
    missing = sorted(set(cursor) - existing)
    if missing:
        topic, partition = missing[0]
        count = sum(1 for t, _ in existing if t == topic)
        raise InvalidArgument(
            f"cursor names {topic}/{partition}, which does not exist: {topic!r} has {count} partitions"
        )


def check_ends(cursor: Cursor, ends: Mapping[Position, int]) -> None:
    """Refuse a cursor offset past its partition's end: a stream gives none (its cursor is at most the end
    it read up to, and the log only grows), so the log was re-created or restored from an older copy, and
    reading from there would skip whatever is written up to that offset."""
    for (topic, partition), offset in sorted(cursor.items()):
        if offset > ends[topic, partition]:
            raise InvalidArgument(
                # not how far the log goes: the partition is every workspace's, and its end tells how much
                # the others write
                f"cursor names offset {offset} of {topic!r} partition {partition}, beyond the log's end: no "
                "stream of this log gave it (the log was re-created or restored from an older copy since); "
                "resume from a cursor this log gave, or start again with an empty cursor or from_end"
            )


PREFETCH_KBYTES = 2_048


class LogSubscription:
    """A consumer without a group (nothing committed on the broker: the cursor is the caller's) over
    every partition of every log topic, read_committed. Blocking: call it off the event loop."""

    def __init__(self, kafka: KafkaSettings, wanted: Filter, cursor: Cursor, from_end: bool = False) -> None:
        self.topics = log_topics(kafka)
        check_cursor(cursor, self.topics)
        self.filter = wanted
        self.cursor: dict[Position, int] = dict(cursor)
        self._from_end = from_end
        self._lost: FailedPrecondition | None = None  # the log lost the stream's position: the next poll raises it
        self._consumer = Consumer(
            {
                "bootstrap.servers": kafka.bootstrap_servers,
                "group.id": f"{kafka.topic_prefix}subscribe-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                # what it fetches ahead of the reader: librdkafka's default is 64 MB per consumer, and a
                # process holds one per stream (100) or webhook (20 a workspace), most reading from the start
                "queued.max.messages.kbytes": PREFETCH_KBYTES,
                # an offset the broker does not hold is an error poll raises: librdkafka's default jumps to
                # the end, and every record written up to the cursor's offset was skipped without a word
                "auto.offset.reset": "error",
            }
        )

    def start(self) -> None:
        """Assign every partition at its cursor position, or where the log starts (or ends) now; refuse a
        cursor past a partition's end."""
        try:
            partitions = self._partitions()
            check_partitions(self.cursor, partitions)
            marks = {position: self._watermarks(position) for position in partitions}
            check_ends(self.cursor, {position: high for position, (_, high) in marks.items()})
            for position, (low, high) in marks.items():
                # a number, not OFFSET_END/BEGINNING: every cursor the stream gives names every partition, so
                # resuming from it neither skips what a quiet partition got since nor replays its history
                self.cursor.setdefault(position, high if self._from_end else low)
        except KafkaException as exc:  # the broker is away (restarting): the caller retries, as a stream broken later
            raise Unavailable(
                f"the log is unavailable ({exc.args[0].str()}); subscribe again from your last cursor"
            ) from exc
        self._consumer.assign(
            [TopicPartition(topic, partition, self.cursor[topic, partition]) for topic, partition in partitions]
        )

    def _partitions(self) -> list[Position]:
        meta = self._consumer.list_topics(timeout=10).topics
        # a topic not created yet in this deployment: nothing to read there
        return [(topic, partition) for topic in self.topics if topic in meta for partition in meta[topic].partitions]

    def _watermarks(self, position: Position) -> tuple[int, int]:
        # read_committed: the high watermark is the last stable offset, where OFFSET_END would start
        marks = self._consumer.get_watermark_offsets(TopicPartition(*position), timeout=10, cached=False)
        if marks is None:
            raise Unavailable(f"the broker did not say where {position[0]}/{position[1]} starts and ends in 10 s")
        return marks

    def poll(self, timeout: float = 0.5, max_records: int = 500) -> list[Delivered]:
        """The wanted events among the next records, each with the cursor just past it."""
        if self._lost is not None:
            raise self._lost
        delivered = []
        for msg in self._consumer.consume(max_records, timeout):
            if msg.error() is not None:
                if msg.error().code() != KafkaError._AUTO_OFFSET_RESET:
                    continue  # transient broker errors: librdkafka retries by itself
                self._lost = self._position_lost(msg)
                if not delivered:
                    raise self._lost
                return delivered  # what came before it first; the next poll ends the subscription
            try:
                event = self._wanted(msg)
            except Unavailable:
                if not delivered:
                    raise
                self._rewind()  # what came before it first; the next poll stops at it
                return delivered
            self.cursor[(msg.topic(), msg.partition())] = msg.offset() + 1
            if event is not None:
                delivered.append(Delivered(event, msg.topic(), msg.partition(), msg.offset(), dict(self.cursor)))
        return delivered

    def _position_lost(self, msg: Message) -> FailedPrecondition:
        """The error ending a subscription whose next offset on `msg`'s partition the log no longer holds."""
        topic, partition = msg.topic(), msg.partition()
        offset = self.cursor.get((topic, partition), msg.offset())
        return FailedPrecondition(
            f"the log no longer holds offset {offset} of {topic!r} partition {partition} (re-created, restored "
            "from an older copy or its records deleted under the stream): it ends there instead of skipping to "
            "the end; resume from a cursor this log gave, or start again with an empty cursor or from_end"
        )

    def _rewind(self) -> None:
        """Read again from the cursor: records fetched past it were not delivered."""
        for (topic, partition), offset in self.cursor.items():
            self._consumer.seek(TopicPartition(topic, partition, offset))

    def _wanted(self, msg: Message) -> Event | None:
        if not self.filter.wants_key(msg.key()):
            return None
        try:
            event = read_input(msg, "API or webhooks process")
        except NewerThanThisCode as exc:
            if not self.filter.may_want(exc.type_name):
                return None  # a type the subscription does not take (it names only types this code knows)
            # skipped, the cursor moved past it and the event was never delivered, even after the upgrade:
            # the stream ends here instead (the cursor stays before it), and a webhook's loop stops and is
            # started again, from the last event delivered, until this process is upgraded
            raise Unavailable(f"{exc}, then resume from the last cursor received") from None
        return event if event is not None and self.filter.wants(event) else None

    def close(self) -> None:
        self._consumer.close()
