"""Reading one workspace's events off every log topic from a cursor, for outside consumers (Subscribe,
webhooks). A cursor is the next offset to read per (topic, partition), for every partition from the start;
it advances past every record handled, delivered or filtered out, so resuming from a delivered event's
cursor misses nothing. Of a keyed write appended twice, only the first append is delivered (first_appends.py)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException, Message, TopicPartition

from services.bus.first_appends import LOOK_BACK_S, FirstAppends
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
LOOK_BACK_TIMEOUT_S = 30.0  # reading back a partition's last minutes before a stream began: past it, Unavailable


def consumer_config(kafka: KafkaSettings) -> dict:
    """A read_committed consumer outside any group (nothing committed on the broker)."""
    return {
        **kafka.client_config(),
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
        self.first_appends = FirstAppends()
        # where the stream began on each partition it did not read from the log's start, until it has read
        # back there (_look_back): a key's first append may lie before, unread
        self._began_past_start: dict[Position, int] = {}
        self._kafka = kafka
        self._consumer = Consumer(consumer_config(kafka))

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
                if self.cursor[position] > low:
                    self._began_past_start[position] = self.cursor[position]
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
        if event is None or not self.filter.wants(event) or self._repeated(msg, event):
            return None
        return event

    def _repeated(self, msg: Message, event: Event) -> bool:
        """Whether `event` is of a later append under an idempotency key than the first, which the
        projections and processors drop: a client's retry after its API died before projecting the first."""
        if getattr(event, "request", None) is None:
            return False
        position = (msg.topic(), msg.partition())
        if position in self._began_past_start:
            self._look_back(position, _millis(msg))
        return self.first_appends.repeated(event)

    def _look_back(self, position: Position, at_ms: int) -> None:
        """Meet the keyed appends of the wanted events written on `position` from LOOK_BACK_S before `at_ms`
        up to where the stream began, so a key's first append before the cursor is known. Once per
        partition, at its first keyed event: the later ones' windows start later still."""
        began = self._began_past_start[position]
        since = self._offset_at(position, at_ms - LOOK_BACK_S * 1_000)
        if 0 <= since < began:
            for msg in self._records(position, since, began):
                event = self._readable(msg)
                if event is not None:
                    self.first_appends.repeated(event)
        del self._began_past_start[position]  # only once it is done: an Unavailable above reads it again

    def _offset_at(self, position: Position, at_ms: int) -> int:
        """The first offset of `position` written at `at_ms` or later; -1 if none is."""
        try:
            (found,) = self._consumer.offsets_for_times([TopicPartition(*position, max(at_ms, 0))], timeout=10)
        except KafkaException as exc:
            raise Unavailable(f"the log is unavailable ({exc.args[0].str()}); resume from the last cursor") from exc
        return found.offset

    def _records(self, position: Position, first: int, end: int) -> Iterator[Message]:
        """The committed records of `position` from offset `first` up to `end` (excluded), by a consumer of
        their own: the stream's stays where it is."""
        reader = Consumer({**consumer_config(self._kafka), "enable.partition.eof": True})
        deadline = time.monotonic() + LOOK_BACK_TIMEOUT_S
        try:
            reader.assign([TopicPartition(*position, first)])
            while time.monotonic() < deadline:
                for msg in reader.consume(500, 0.5):
                    if msg.error() is None and msg.offset() < end:
                        yield msg
                    elif msg.error() is None or msg.error().code() == KafkaError._PARTITION_EOF:
                        return  # past `end`, or at the log's end with nothing more: a transaction marker
        finally:
            reader.close()
        raise Unavailable(
            f"reading back {position[0]}/{position[1]} from offset {first} to {end} took over "
            f"{LOOK_BACK_TIMEOUT_S:g} s; resume from the last cursor"
        )

    def _readable(self, msg: Message) -> Event | None:
        """A record read back, if it is a wanted event this code can read: the stream itself is past it."""
        if not self.filter.wants_key(msg.key()):
            return None
        try:
            event = read_input(msg, "API or webhooks process")
        except NewerThanThisCode:
            return None
        return event if event is not None and self.filter.wants(event) else None

    def close(self) -> None:
        self._consumer.close()


def _millis(msg: Message) -> int:
    """When `msg` was written, by its timestamp (now if it has none)."""
    kind, at_ms = msg.timestamp()
    return int(time.time() * 1_000) if kind == TIMESTAMP_NOT_AVAILABLE else at_ms
