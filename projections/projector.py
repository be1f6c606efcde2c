"""The projector: consume the log and keep the Postgres projections current.

Offsets live in Postgres next to the rows (see apply.py); Kafka's committed offsets are not used,
so the database alone decides where reading resumes.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from sqlalchemy import Engine, select

from projections.apply import Applied, Record, apply_batch, stored_offsets
from projections.db import create_schema, sync_engine
from projections.metrics import LagGauges, QuarantineCounter
from projections.outages import DATABASE_AWAY, while_database_away
from projections.schema import projection_meta
from services.bus.runner import usable
from services.bus.topics import ALL_TOPICS

if TYPE_CHECKING:  # the CLI composes the whole Settings; at run time projections never import services.settings
    from services.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")


def to_record(msg: Message) -> Record:
    kind, ms = msg.timestamp()
    key = msg.key()
    return Record(
        topic=msg.topic(),
        partition=msg.partition(),
        offset=msg.offset(),
        key=key.decode(errors="replace") if key is not None else None,
        value=msg.value() or b"",
        logged_at=datetime.fromtimestamp(ms / 1000, UTC) if ms > 0 else None,
    )


def consumer_config(settings: Settings, group_id: str, instance_id: str = "") -> dict:
    config = {
        **settings.kafka.client_config(),
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",  # aborted API writes must never be projected
        "auto.offset.reset": "earliest",
        # fetch.min.bytes=1 makes the broker answer a fetch as soon as committed data arrives; the
        # wait only bounds idle polling (10 ms cost the broker ~0.1 core of a 2-core box at rest,
        # with the same projection lag)
        "fetch.wait.max.ms": 100,
        "fetch.min.bytes": 1,
        # a SIGKILLed projector leaves its membership behind: a replacement without its instance id gets
        # the partitions only when that session expires (librdkafka's default 45 s, during which keyed
        # writes wait for the projector too); 10 s by default, as the processors' runner has
        "session.timeout.ms": int(settings.projector.session_timeout_s * 1000),
        "heartbeat.interval.ms": 2_000,
    }
    if instance_id:
        # static membership (KIP-345): a member that comes back under its id gets its partitions at once
        config["group.instance.id"] = instance_id
    return config


class Projector:
    """Runs the consume → apply → record-offsets loop until `stop()`."""

    def __init__(self, settings: Settings, engine: Engine | None = None) -> None:
        self.settings = settings
        self.engine = engine or sync_engine(settings.database)
        self.topics = [t.full_name(settings.kafka.topic_prefix) for t in ALL_TOPICS]
        self._stop = threading.Event()
        self._generation: str | None = None
        self._consumer: Consumer | None = None
        self.applied_total = 0
        self.database_waits = 0  # tries that found the database away
        # built once: every batch goes through it (see _while_database_away)
        self._retrying = while_database_away(self._stop, "projector", self._count_database_wait)
        self.lag = LagGauges(self.topics)
        self.quarantine = QuarantineCounter(self.topics)

    def run(self) -> None:
        try:
            self._while_database_away(create_schema, self.engine, self.settings.database.schema_name)
            projector = self.settings.projector
            self._consumer = Consumer(consumer_config(self.settings, projector.group_id, projector.instance_id))
            self._consumer.subscribe(self.topics, on_assign=self._on_assign)
            # Everything allocated so far (modules, engine, consumer) lives as long as the process: keep
            # the collector from re-scanning it. Decoding a batch allocates thousands of objects, and
            # the full collections they trigger had made decoding ~2.5x slower.
            gc.collect()
            gc.freeze()
            while not self._stop.is_set():
                self._step()
        except DATABASE_AWAY:
            if not self._stop.is_set():
                raise
            # stopped while waiting for the database: nothing of the batch was written, a restart redoes it
        finally:
            if self._consumer is not None:
                self._consumer.close()

    def stop(self) -> None:
        self._stop.set()

    def _step(self) -> None:
        msgs = self._poll()
        fatal = next((m.error() for m in msgs if _fatal(m.error())), None)
        if fatal is not None:
            # fenced (another projector under this instance id) or otherwise done for: logged and dropped, it
            # stayed alive projecting nothing, and no supervisor restarted it
            raise KafkaException(fatal)
        records = [to_record(m) for m in msgs if usable(m)]
        if records:
            result = self._while_database_away(self._apply, records)
            if result is not None:
                self.applied_total += result.events
                self.quarantine.parked(result.parked)  # counted once committed (apply.py logs each one)
                self.lag.applied(records)
        self.lag.measure(self._consumer)

    def _poll(self) -> list[Message]:
        """Up to max_batch messages: all that are fetched already, else wait for the first one.

        `consume(n, timeout)` alone waits until n messages or the timeout, so below n per timeout
        every batch would idle for the whole timeout before being applied.
        """
        max_batch, timeout = self.settings.projector.max_batch, self.settings.projector.poll_timeout_s
        msgs = self._consumer.consume(max_batch, 0)
        if not msgs:
            msgs = self._consumer.consume(1, timeout)
            if msgs and max_batch > 1:
                msgs += self._consumer.consume(max_batch - 1, 0)
        return msgs

    def _apply(self, records: list[Record]) -> Applied | None:
        with self.engine.begin() as conn:
            if self._schema_swapped(conn):
                self._rewind_to_stored()
                return None
            return apply_batch(conn, records)

    def _schema_swapped(self, conn) -> bool:
        generation = conn.scalar(select(projection_meta.c.generation))
        swapped = self._generation is not None and generation != self._generation
        self._generation = generation
        return swapped

    def _while_database_away(self, call: Callable[..., T], *args) -> T:
        """`call(*args)`, tried again while the database is away, until it is back or `stop()`.

        A Postgres restart used to end the process (every chaos run's one crash not injected) and left
        the projection stopped until a supervisor started another, which then waited out the old
        member's Kafka session. Trying again is safe: a batch is applied in one transaction with its
        offsets, so a try cut short wrote nothing, and records already applied are skipped."""
        return self._retrying(call, *args)

    def _count_database_wait(self) -> None:
        self.database_waits += 1

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._while_database_away(self._assign, consumer, partitions)

    def _assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self.engine.begin() as conn:
            self._generation = conn.scalar(select(projection_meta.c.generation))
            done = stored_offsets(conn, {(p.topic, p.partition) for p in partitions})
        for p in partitions:
            p.offset = done.get((p.topic, p.partition), OFFSET_BEGINNING)
        consumer.assign(partitions)
        log.info("projector assigned %s", [(p.topic, p.partition, p.offset) for p in partitions])

    def _rewind_to_stored(self) -> None:
        # a rebuild swapped in a new schema: resume from the offsets *it* recorded
        assigned = self._consumer.assignment()
        with self.engine.begin() as conn:
            done = stored_offsets(conn, {(p.topic, p.partition) for p in assigned})
        for p in assigned:
            self._consumer.seek(
                TopicPartition(p.topic, p.partition, done.get((p.topic, p.partition), OFFSET_BEGINNING))
            )
        log.info("projection schema was swapped; rewound to its stored offsets")


def _fatal(error: KafkaError | None) -> bool:
    """Whether a consumer's error ends it for good (librdkafka reports a fenced static member as _FATAL)."""
    return error is not None and (error.fatal() or error.code() == KafkaError._FATAL)
