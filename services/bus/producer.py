"""Append events to the log, all events of one call atomically (a Kafka transaction)."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

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
    write may be committed. Only a retry under the same idempotency key is safe. `positions`: where the
    broker acknowledged its records, which then become readable, or not, as the transaction ends
    (streams.committed tells which)."""

    def __init__(self, message: str, positions: ConsistencyToken | None = None) -> None:
        super().__init__(message)
        self.positions = positions


@dataclass
class _Slot:
    """One producer of the pool and the transactional id it keeps; no producer while it must be reopened."""

    transactional_id: str
    producer: Producer | None = None


@dataclass
class _Write:
    """One caller's events, written all or none, and where the caller waits for their positions."""

    events: Sequence[Event]
    headers: list[tuple[str, bytes]] | None
    done: Future = field(default_factory=Future)
    records: list[tuple[str, bytes, bytes]] = field(default_factory=list)  # (topic, key, value)
    written: list[tuple[str, int, int]] = field(default_factory=list)


_CLOSING = None  # put on the queue once per writer thread by close()


class EventLog:
    """A pool of transactional producers, each served by its own writer thread; the writes waiting when a
    producer comes free are committed together in one transaction (group commit).

    Grouping, because a transaction costs the broker far more than its records: on the local broker,
    transactions of 100 events cost it 17–32 µs an event, of 800 events 6 µs. Under load the writes that
    queue while every producer is busy go in the next transaction together; a lone write still goes at
    once, alone. Every write is still all or none, and gets the positions of its own events only; a
    transaction that fails fails every write in it, and none of them is visible.

    A pool, because a commit round trip is the slow part: while one producer commits, another takes the
    writes that arrived meanwhile.

    A write that fails and cannot be cleanly aborted (the broker away: the commit times out with the
    records still queued) leaves its producer unusable, and librdkafka would refuse every later
    transaction on it. That producer is purged and dropped; the next write on its slot opens a new one
    with the same transactional id, whose init_transactions fences the old one and aborts its open
    transaction, so the failed write can never be committed later.
    """

    def __init__(self, settings: KafkaSettings, client_id: str = "peerlog-api", instance: str = "") -> None:
        self._settings = settings
        self._client_id = client_id
        # an instance name kept across restarts gives the process started again after a crash the same
        # transactional ids, whose init_transactions aborts what the dead one left open; under new ids each
        # time, such a transaction held up every read_committed reader of its partitions (the projector,
        # the router) until the broker aborted it, transaction.timeout.ms later
        self._instance = instance or uuid.uuid4().hex[:12]
        self._pending: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._writers: list[threading.Thread] = []
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
        with ThreadPoolExecutor(len(slots)) as opening:
            for slot, producer in zip(slots, opening.map(lambda s: self._open(s.transactional_id, 30), slots)):
                slot.producer = producer
        for slot in slots:
            writer = threading.Thread(target=self._serve, args=(slot,), name=f"append-{slot.transactional_id}")
            writer.daemon = True  # a process that exits without close() must not hang on it
            writer.start()
            self._writers.append(writer)

    def _open(self, transactional_id: str, timeout: float) -> Producer:
        producer = Producer(
            {
                **self._settings.client_config(),
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

    def submit(self, events: Sequence[Event], headers: list[tuple[str, bytes]] | None = None) -> Future:
        """Queue `events` to be written all or none; the future gives their positions once Kafka
        acknowledged them, or raises AppendFailed / AppendUnresolved."""
        if not self._writers:
            raise AppendFailed("the log is not started, or closed")
        write = _Write(events, headers)
        self._pending.put(write)
        return write.done

    def append_sync(self, events: Sequence[Event], headers: list[tuple[str, bytes]] | None = None) -> ConsistencyToken:
        """Write all `events` or none; return the positions written once Kafka acknowledged them."""
        return self.submit(events, headers).result()

    async def append(self, events: Sequence[Event]) -> ConsistencyToken:
        # the trace context is read here: the writer thread does not see this task's context
        return await asyncio.wrap_future(self.submit(events, tracing.record_headers()))

    def _serve(self, slot: _Slot) -> None:
        """A writer thread: take the first waiting write and those queued behind it, commit them together."""
        while True:
            first = self._pending.get()
            if first is _CLOSING:
                return
            group, closing = self._group(first)
            self._write(slot, group)
            if closing:
                return

    def _group(self, first: _Write) -> tuple[list[_Write], bool]:
        """`first` and the writes queued behind it, taken until they hold `append_group_max_events` events
        or none is left; whether close() asked this thread to stop."""
        group, size = [], 0
        write: _Write | None = first
        while write is not None:
            if write.done.set_running_or_notify_cancel():  # a write cancelled before it began is skipped
                group.append(write)
                size += len(write.events)
            if size >= self._settings.append_group_max_events:
                break
            try:
                write = self._pending.get_nowait()
            except queue.Empty:
                break
            if write is _CLOSING:
                return group, True
        return group, False

    def _write(self, slot: _Slot, group: list[_Write]) -> None:
        group = [w for w in group if _encoded(w, self._settings.topic_prefix)]
        if not group:
            return
        try:
            if slot.producer is None:
                slot.producer = self._open(slot.transactional_id, 10)
            self._transact(slot.producer, group)
        except KafkaException as exc:
            metrics.ABORTED.labels(component=self._client_id).inc()
            self._recover(slot, exc)
            _fail(group, AppendFailed(f"the log rejected the write: {exc.args[0].str()}"), exc)
        except AppendUnresolved as exc:
            slot.producer = None  # stuck in its commit: the slot's next producer finishes or fences it
            for write in group:  # each with the positions of its own records
                each = AppendUnresolved(str(exc), ConsistencyToken.of(write.written))
                each.__cause__ = exc.__cause__
                write.done.set_exception(each)
        except Exception as exc:  # noqa: BLE001 — whatever it is, no caller may wait forever
            # e.g. BufferError: librdkafka's queue filled mid-transaction. Left open, the transaction would
            # hold back every read_committed reader of its partitions and refuse the slot's next write
            self._recover(slot, None)
            failed = f"the write failed before its commit: {type(exc).__name__}: {exc}"
            _fail(group, exc if isinstance(exc, AppendFailed) else AppendFailed(failed), exc)
        else:
            metrics.COMMITTED.labels(component=self._client_id).inc()
            metrics.GROUPED.labels(component=self._client_id).observe(len(group))
            for write in group:
                write.done.set_result(ConsistencyToken.of(write.written))

    def _transact(self, producer: Producer, group: list[_Write]) -> None:
        errors: list[str] = []
        unanswered = [0]  # records produced whose delivery report has not come back

        def delivered_to(write: _Write):
            def on_delivery(err, msg) -> None:
                unanswered[0] -= 1
                if err is not None:
                    errors.append(err.str())
                else:
                    write.written.append((msg.topic(), msg.partition(), msg.offset()))

            return on_delivery

        producer.begin_transaction()
        for write in group:
            on_delivery = delivered_to(write)
            for topic, key, value in write.records:
                producer.produce(topic, value, key=key, headers=write.headers, on_delivery=on_delivery)
                unanswered[0] += 1
        self._commit(producer, lambda: unanswered[0])  # flushes: every delivery callback has run
        if errors:
            raise AppendFailed(f"delivery failed: {errors[0]}")

    def _commit(self, producer: Producer, unanswered: Callable[[], int]) -> None:
        """commit_transaction, called again for as long as its outcome is open.

        librdkafka sends the commit (EndTxn) only once every record is acknowledged. A call that timed out
        with records still unacknowledged never sent it, so the write can be refused whole: the slot's next
        producer fences the transaction. A call that timed out after that may have its commit at the
        coordinator, which a fencing producer would complete: refusing then would let the client's retry
        write it twice. Only another call tells how it ended. Which of the two it was is counted from the
        delivery reports (`unanswered()`, once the queue is served): `len(producer)` counts the client's
        error events too, and a broker gone after the commit queues a few.
        """
        timeout = self._settings.append_timeout_s
        deadline = time.monotonic() + self._settings.transaction_timeout_ms / 1000
        while True:
            try:
                producer.commit_transaction(timeout)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
                producer.poll(0)  # delivery reports already in serve their callbacks
                if unanswered() > 0:
                    raise
                if time.monotonic() >= deadline:
                    raise AppendUnresolved(
                        "the log did not confirm whether the write was committed; it may have been: "
                        f"retry only under the same idempotency key ({exc.args[0].str()})"
                    ) from exc

    @staticmethod
    def _recover(slot: _Slot, exc: KafkaException | None) -> None:
        """Abort the failed transaction, or drop the producer so that the slot's next one fences it (`exc`
        None: a failure of the client, not the log, with the transaction open)."""
        producer = slot.producer
        if producer is not None and (exc is None or exc.args[0].txn_requires_abort()):
            try:
                producer.abort_transaction(10)
                return
            except KafkaException:
                pass
        if producer is not None:
            producer.purge()  # what never reached the broker never will
        slot.producer = None

    def close(self) -> None:
        """Finish the writes already queued, then stop the writer threads and flush their producers."""
        writers, self._writers = self._writers, []
        for _ in writers:
            self._pending.put(_CLOSING)
        deadline = time.monotonic() + self._settings.append_timeout_s  # one wait for all: they write side by side
        for writer in writers:
            writer.join(max(0.0, deadline - time.monotonic()))
        while True:  # a write queued behind the last writer's stop is refused, not left waiting
            try:
                write = self._pending.get_nowait()
            except queue.Empty:
                return
            if write is not _CLOSING and write.done.set_running_or_notify_cancel():
                write.done.set_exception(AppendFailed("the log was closed before the write began"))


def _encoded(write: _Write, prefix: str) -> bool:
    """Encode `write`'s events for the log; a write that cannot be encoded fails alone, before its group's
    transaction begins."""
    try:
        write.records = [(topic_for(e).full_name(prefix), e.key.encode(), encode(e)) for e in write.events]
    except Exception as exc:  # noqa: BLE001 — reported to the one caller it concerns
        write.done.set_exception(AppendFailed(f"the write could not be encoded: {exc}"))
        return False
    return True


def _fail(group: list[_Write], error: BaseException, cause: BaseException | None) -> None:
    """Fail every write of a group, each with its own exception object: one raised in several callers'
    threads at once would have its traceback extended by all of them."""
    for write in group:
        try:
            each = type(error)(*error.args)
        except Exception:  # noqa: BLE001 — an exception type that cannot be made again from its args
            each = AppendFailed(f"the write failed: {error!r}")
        each.__cause__ = cause
        write.done.set_exception(each)


class Emitter:
    """An idempotent, non-transactional producer for events that must be visible at once.

    Used for clock ticks and progress markers (e.g. DerivationStarted), which must not wait for a
    processor's transaction to commit. Consumers treat them as hints, so a repeat is harmless.
    """

    def __init__(self, settings: KafkaSettings, client_id: str) -> None:
        self._settings = settings
        self._producer = Producer(
            {
                **settings.client_config(),
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
            # what is still queued is dropped, not sent later: the caller, told they failed, emits them
            # again (a tick each time), and during a long outage they would fill the client's queue
            self._producer.purge(in_queue=True, in_flight=False)
            raise AppendFailed("side events were not acknowledged within 30 s")

    async def emit(self, events: Sequence[Event]) -> None:
        await asyncio.get_running_loop().run_in_executor(self._io, self.emit_sync, events, tracing.record_headers())
