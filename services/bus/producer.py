"""Append events to the log, all events of one call atomically (a Kafka transaction)."""

from __future__ import annotations

import asyncio
import queue
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from confluent_kafka import KafkaException, Producer

from services import tracing
from services.bus import metrics
from services.bus.consistency import ConsistencyToken
from services.bus.settings import KafkaSettings
from services.bus.topics import topic_for
from services.events import Event, encode


def init_transactions(producer: Producer, timeout: float) -> None:
    """`producer.init_transactions`, after a metadata request. librdkafka sends its first coordinator
    query through the bootstrap connection, which it drops as soon as the metadata names the broker
    behind it; the query is then lost and retried on a 500 ms timer. Measured on the local broker: 1 start
    in 4 took 0.52 s instead of 0.07 s; with the metadata first, none did."""
    producer.list_topics(timeout=timeout)
    producer.init_transactions(timeout)


class AppendFailed(RuntimeError):
    """The log did not accept a write; nothing of it became visible."""


class AppendUnresolved(RuntimeError):
    """The log took a write's commit but did not say, within the transaction timeout, how it ended: the
    write may be committed. Only a retry under the same idempotency key is safe."""


@dataclass
class _Slot:
    """One producer of the pool and the transactional id it keeps; no producer while it must be reopened."""

    transactional_id: str
    producer: Producer | None = None


class EventLog:
    """A pool of transactional producers; each `append` is one transaction on one producer.

    A pool, because a producer holds one open transaction at a time and a commit round-trip is the
    slow part: several in flight keep concurrent writers from queueing behind each other.

    A write that fails and cannot be cleanly aborted (the broker away: the commit times out with the
    records still queued) leaves its producer unusable, and librdkafka would refuse every later
    transaction on it. That producer is purged and dropped; the next write on its slot opens a new one
    with the same transactional id, whose init_transactions fences the old one and aborts its open
    transaction, so the failed write can never be committed later.
    """

    def __init__(self, settings: KafkaSettings, client_id: str = "peerlog-api") -> None:
        self._settings = settings
        self._client_id = client_id
        self._instance = uuid.uuid4().hex[:12]
        self._idle: queue.Queue[_Slot] = queue.Queue()
        self._executor = ThreadPoolExecutor(settings.producer_pool_size, thread_name_prefix="append")
        metrics.known(client_id)

    @property
    def kafka(self) -> KafkaSettings:
        """Where this log lives (readers of the same log, e.g. Subscribe, open their own consumers)."""
        return self._settings

    def start(self) -> None:
        """Open the pool's producers all at once: each waits on its own round trips to the transaction
        coordinator, which one after another made a pool of n producers take n times as long."""
        slots = [
            _Slot(f"{self._client_id}-{self._instance}-{serial}")
            for serial in range(1, self._settings.producer_pool_size + 1)
        ]
        for slot, producer in zip(slots, self._executor.map(lambda s: self._open(s.transactional_id, 30), slots)):
            slot.producer = producer
            self._idle.put(slot)

    def _open(self, transactional_id: str, timeout: float) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self._settings.bootstrap_servers,
                "client.id": self._client_id,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 1,
                "compression.type": "lz4",
                "transactional.id": transactional_id,
                "transaction.timeout.ms": self._settings.transaction_timeout_ms,
            }
        )
        init_transactions(producer, timeout)
        return producer

    def append_sync(self, events: Sequence[Event], headers: list[tuple[str, bytes]] | None = None) -> ConsistencyToken:
        """Write all `events` or none; return the positions written once Kafka acknowledged them."""
        slot = self._idle.get()
        try:
            if slot.producer is None:
                slot.producer = self._open(slot.transactional_id, 10)
            token = self._transact(slot.producer, events, headers)
            metrics.COMMITTED.labels(component=self._client_id).inc()
            return token
        except KafkaException as exc:
            metrics.ABORTED.labels(component=self._client_id).inc()
            self._recover(slot, exc)
            raise AppendFailed(f"the log rejected the write: {exc.args[0].str()}") from exc
        except AppendUnresolved:
            slot.producer = None  # stuck in its commit: the slot's next producer finishes or fences it
            raise
        finally:
            self._idle.put(slot)

    async def append(self, events: Sequence[Event]) -> ConsistencyToken:
        loop = asyncio.get_running_loop()
        # the trace context is read here: the executor's thread does not see this task's context
        return await loop.run_in_executor(self._executor, self.append_sync, events, tracing.record_headers())

    def _transact(
        self, producer: Producer, events: Sequence[Event], headers: list[tuple[str, bytes]] | None
    ) -> ConsistencyToken:
        written: list[tuple[str, int, int]] = []
        errors: list[str] = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                errors.append(err.str())
            else:
                written.append((msg.topic(), msg.partition(), msg.offset()))

        producer.begin_transaction()
        for event in events:
            topic = topic_for(event).full_name(self._settings.topic_prefix)
            producer.produce(topic, encode(event), key=event.key.encode(), headers=headers, on_delivery=on_delivery)
        self._commit(producer)  # flushes: every delivery callback has run
        if errors:
            raise AppendFailed(f"delivery failed: {errors[0]}")
        return ConsistencyToken.of(written)

    def _commit(self, producer: Producer) -> None:
        """commit_transaction, called again for as long as its outcome is open.

        librdkafka sends the commit (EndTxn) only once every record is acknowledged. A call that timed out
        with records still queued never sent it, so the write can be refused whole: the slot's next
        producer fences the transaction. A call that timed out after that may have its commit at the
        coordinator, which a fencing producer would complete: refusing then would let the client's retry
        write it twice. Only another call tells how it ended.
        """
        timeout = self._settings.append_timeout_s
        deadline = time.monotonic() + self._settings.transaction_timeout_ms / 1000
        while True:
            try:
                producer.commit_transaction(timeout)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or len(producer) > 0:
                    raise
                if time.monotonic() >= deadline:
                    raise AppendUnresolved(
                        "the log did not confirm whether the write was committed; it may have been: "
                        f"retry only under the same idempotency key ({exc.args[0].str()})"
                    ) from exc

    @staticmethod
    def _recover(slot: _Slot, exc: KafkaException) -> None:
        """Abort the failed transaction, or drop the producer so that the slot's next one fences it."""
        producer, error = slot.producer, exc.args[0]
        if producer is not None and error.txn_requires_abort():
            try:
                producer.abort_transaction(10)
                return
            except KafkaException:
                pass
        if producer is not None:
            producer.purge()  # what never reached the broker never will
        slot.producer = None

    def close(self) -> None:
        while not self._idle.empty():
            slot = self._idle.get_nowait()
            if slot.producer is not None:
                slot.producer.flush(10)
        self._executor.shutdown(wait=False)


class Emitter:
    """An idempotent, non-transactional producer for events that must be visible at once.

    Used for clock ticks and progress markers (e.g. DerivationStarted), which must not wait for a
    processor's transaction to commit. Consumers treat them as hints, so a repeat is harmless.
    """

    def __init__(self, settings: KafkaSettings, client_id: str) -> None:
        self._settings = settings
        self._producer = Producer(
            {
                "bootstrap.servers": settings.bootstrap_servers,
                "client.id": client_id,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
            }
        )
        self._io = ThreadPoolExecutor(2, thread_name_prefix=client_id)

    def emit_sync(self, events: Sequence[Event], headers: list[tuple[str, bytes]] | None = None) -> None:
        for event in events:
            topic = topic_for(event).full_name(self._settings.topic_prefix)
            self._producer.produce(topic, encode(event), key=event.key.encode(), headers=headers)
        if self._producer.flush(30) > 0:
            raise AppendFailed("side events were not acknowledged within 30 s")

    async def emit(self, events: Sequence[Event]) -> None:
        await asyncio.get_running_loop().run_in_executor(self._io, self.emit_sync, events, tracing.record_headers())
