"""Exactly-once stream processing on Kafka transactions: consume → decide → produce, atomically.

Each processor keeps per-key state in memory, backed by a compacted changelog topic. One Kafka
transaction per batch holds the output events, the state changes and the consumed offsets
(`send_offsets_to_transaction` with the consumer's group metadata, so a zombie worker is fenced).
A crash anywhere before the commit aborts all three; the next owner of the partitions restores the
state from the changelog and re-reads from the committed offsets, so nothing is lost or doubled.

Why not Faust's `exactly_once`: faust-streaming picks the transactional producer from the *output*
record's partition, so a processor that re-keys (session → pair, as the router and deriver do) does
not commit its output in the transaction of the input it came from, and sends to topics the app does
not consume leave outside any transaction. Measured here: a worker running router + deriver under
faust 0.15.3 stopped committing after the first derived batch.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from services.bus.admin import create_topics
from services.bus.streams import read, to_the_end
from services.bus.topics import COMPACTED_CONFIG, TopicSpec, topic_for
from services.config import KafkaSettings
from services.events import Event, encode

log = logging.getLogger(__name__)

State = dict[str, Any]


@dataclass
class Step:
    """What handling one event produced: events to append, and new states by key (None: delete).

    State keys must belong to the input event's partition (its own key, or that key plus a suffix).
    """

    events: list[Event] = field(default_factory=list)
    states: dict[str, State | None] = field(default_factory=dict)


Get = Callable[[str], "State | None"]


class Processor(Protocol):
    name: str
    inputs: Sequence[TopicSpec]
    max_batch: int

    async def handle(self, get: Get, event: Event) -> Step: ...


Ticker = Callable[[Mapping[str, State]], Awaitable[None]]


class Runner:
    """Runs one processor as a member of its consumer group until `stop()`."""

    def __init__(self, kafka: KafkaSettings, app_id: str, processor: Processor,
                 tick: Ticker | None = None, tick_s: float = 30.0) -> None:
        self.kafka, self.processor, self.tick, self.tick_s = kafka, processor, tick, tick_s
        self.group = f"{app_id}-{processor.name}"
        self.changelog = TopicSpec(name=f"{app_id.removeprefix(kafka.topic_prefix)}-{processor.name}-state",
                                   key="state key", events=(), config=dict(COMPACTED_CONFIG))
        self.changelog_topic = self.changelog.full_name(kafka.topic_prefix)
        self.states: dict[str, State] = {}
        self.partition_of: dict[str, int] = {}  # the input (= changelog) partition each state belongs to
        self._stop = asyncio.Event()
        self.processed = 0
        # its own threads for blocking Kafka calls: runners must not queue behind each other's polls
        self._io = ThreadPoolExecutor(2, thread_name_prefix=self.group)

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._io, create_topics, self.kafka, (self.changelog,))
        self.consumer = Consumer(self._consumer_config())
        self.producer = Producer(self._producer_config())
        await loop.run_in_executor(self._io, self.producer.init_transactions, 60)
        self.consumer.subscribe([s.full_name(self.kafka.topic_prefix) for s in self.processor.inputs],
                                on_assign=self._on_assign, on_revoke=self._on_revoke)
        try:
            await self._loop(loop)
        finally:
            await loop.run_in_executor(self._io, self.consumer.close)
            self._io.shutdown(wait=False)

    async def _loop(self, loop) -> None:
        next_tick = time.monotonic() + self.tick_s
        while not self._stop.is_set():
            msgs = await loop.run_in_executor(self._io, self.consumer.consume, self.processor.max_batch, 0.05)
            records = [m for m in msgs if usable(m)]
            if records:
                await self._transact(loop, records)
            if self.tick and time.monotonic() >= next_tick:
                next_tick = time.monotonic() + self.tick_s
                await self.tick(dict(self.states))

    async def _transact(self, loop, records: list[Message]) -> None:
        self.producer.begin_transaction()
        try:
            # keys are independent: handle them concurrently (model calls overlap), each key in order
            by_key: dict[bytes, list[Message]] = {}
            for msg in records:
                by_key.setdefault(msg.key() or b"", []).append(msg)
            await asyncio.gather(*(self._handle_in_order(msgs) for msgs in by_key.values()))
            offsets = _next_offsets(records)
            meta = self.consumer.consumer_group_metadata()
            await loop.run_in_executor(self._io, self.producer.send_offsets_to_transaction, offsets, meta, 30)
            await loop.run_in_executor(self._io, self.producer.commit_transaction, 60)
        except BaseException:
            # nothing of the batch may survive: abort, and let the process die so a clean owner resumes
            await loop.run_in_executor(self._io, self.producer.abort_transaction, 30)
            raise
        self.processed += len(records)

    async def _handle_in_order(self, msgs: list[Message]) -> None:
        for msg in msgs:
            await self._handle(msg)

    async def _handle(self, msg: Message) -> None:
        event = read(msg.value())
        if event is None:
            return
        step = await self.processor.handle(self.states.get, event)
        for out in step.events:
            topic = topic_for(out).full_name(self.kafka.topic_prefix)
            self.producer.produce(topic, encode(out), key=out.key.encode())
        for key, state in step.states.items():
            self._save_state(key, state, msg.partition())

    def _save_state(self, key: str, state: State | None, partition: int) -> None:
        if state == self.states.get(key) and key in self.partition_of:
            return
        # state lives on the changelog partition of the input it belongs to, so restoring a
        # partition's inputs restores exactly the state they need
        self.partition_of[key] = partition
        if state is None:
            self.states.pop(key, None)
            self.producer.produce(self.changelog_topic, None, key=key.encode(), partition=partition)
        else:
            self.states[key] = state
            self.producer.produce(self.changelog_topic, orjson.dumps(state), key=key.encode(), partition=partition)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for part in {p.partition for p in partitions}:
            restored = restore(self.kafka, self.changelog_topic, part)
            self.states.update(restored)
            self.partition_of.update(dict.fromkeys(restored, part))
        log.info("%s assigned partitions %s; %d states in memory", self.group,
                 sorted({p.partition for p in partitions}), len(self.states))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {p.partition for p in partitions}
        gone = [k for k, p in self.partition_of.items() if p in revoked]
        for key in gone:
            self.states.pop(key, None)
            self.partition_of.pop(key, None)

    def _consumer_config(self) -> dict:
        return {"bootstrap.servers": self.kafka.bootstrap_servers, "group.id": self.group,
                "enable.auto.commit": False, "isolation.level": "read_committed",
                "auto.offset.reset": "earliest", "fetch.wait.max.ms": 20,
                "session.timeout.ms": 10_000, "heartbeat.interval.ms": 2_000,
                # a batch may hold several slow model calls between polls
                "max.poll.interval.ms": 900_000}

    def _producer_config(self) -> dict:
        return {"bootstrap.servers": self.kafka.bootstrap_servers, "enable.idempotence": True, "acks": "all",
                "transactional.id": f"{self.group}-{uuid.uuid4().hex[:12]}", "linger.ms": 2,
                "transaction.timeout.ms": 900_000}


def usable(msg: Message) -> bool:
    """True for a record; logs a consumer error (end-of-partition notices are not errors)."""
    err = msg.error()
    if err is None:
        return True
    if err.code() != KafkaError._PARTITION_EOF:
        log.warning("consumer error: %s", err)
    return False


def _next_offsets(records: list[Message]) -> list[TopicPartition]:
    last: dict[tuple[str, int], int] = {}
    for m in records:
        last[(m.topic(), m.partition())] = max(m.offset(), last.get((m.topic(), m.partition()), -1))
    return [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]


def restore(kafka: KafkaSettings, topic: str, partition: int) -> dict[str, State]:
    """The latest state per key on one changelog partition (committed records only)."""
    states: dict[str, State] = {}
    for m in to_the_end(kafka, topic, [partition]):
        key = m.key().decode()
        if m.value() is None:
            states.pop(key, None)
        else:
            states[key] = orjson.loads(m.value())
    return states
