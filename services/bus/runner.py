"""Exactly-once stream processing on Kafka transactions: consume → decide → produce, atomically.

Each processor keeps per-key state in memory, backed by a compacted changelog topic. One Kafka
transaction per batch holds the output events, the state changes and the consumed offsets
(`send_offsets_to_transaction` with the consumer's group metadata, so a zombie worker is fenced).
A crash anywhere before the commit aborts all three; the next owner of the partitions restores the
state from the changelog and re-reads from the committed offsets, so nothing is lost or doubled.

When the transaction itself fails (a broker restart, a coordinator move) the processor is not at fault:
the runner ends that incarnation and starts a new one with the same transactional.id. Its
`init_transactions` fences the old producer and aborts its open transaction at once (otherwise
read_committed readers of the output would wait out transaction.timeout.ms), and the new consumer
resumes from the committed offsets with state restored from the changelog. Every blocking
transactional call has a deadline of our own, because librdkafka 2.16's send_offsets_to_transaction can
ignore its timeout and wait forever after a broker restart (measured here; librdkafka issues 5456, 5511).

Why not Faust's `exactly_once`: faust-streaming picks the transactional producer from the *output*
record's partition, so a processor that re-keys (session → pair, as the router and deriver do) does
not commit its output in the transaction of the input it came from, and sends to topics the app does
not consume leave outside any transaction. Measured here: a worker running router + deriver under
faust 0.15.3 stopped committing after the first derived batch. tests/support/faust_eos.py fixes that,
but across a SIGKILL restart Faust still skips records (tests/integration/test_faust_exactly_once.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from opentelemetry.trace import SpanKind

from services import tracing
from services.bus import metrics
from services.bus.admin import create_topics, partitions_of
from services.bus.producer import AppendFailed, init_transactions
from services.bus.settings import KafkaSettings
from services.bus.stall import probe, stall_after_s
from services.bus.streams import read_input
from services.bus.takeover import State, TransactionFailed, await_closed_changelog, await_stable_offsets, restore
from services.bus.topics import COMPACTED_CONFIG, TopicSpec, topic_for
from services.events import Event, encode
from services.events.requests import screen

log = logging.getLogger(__name__)

# the changelog key suffix of a scope's recent idempotency keys (ids cannot hold "|")
SCREEN_SUFFIX = "|keyed"


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


# the longest a batch may take, unless its processor bounds each event's handling (`event_budget_s`)
DEFAULT_BATCH_BUDGET_S = 840.0
_POLL_MARGIN_S = 60.0


def max_poll_interval_ms(processor: Processor) -> int:
    """Kafka evicts a member that has not polled for max.poll.interval.ms, and the batch it was handling is
    redone by the next owner (a fenced transaction, the same model calls again). A batch runs its keys
    concurrently but each key's events in turn, so at worst all `max_batch` events share one key: size the
    interval to that, from the budget the processor enforces per event."""
    budget = getattr(processor, "event_budget_s", None)
    batch_s = DEFAULT_BATCH_BUDGET_S if budget is None else budget * processor.max_batch
    return int((batch_s + _POLL_MARGIN_S) * 1000)


Ticker = Callable[[Mapping[str, State]], Awaitable[None]]

# our own deadline on a transactional call, beyond the timeout handed to librdkafka: a stall ends the
# incarnation after at most that long (measured after a broker restart: send_offsets never returned)
_GRACE_S = 5.0
# a round trip to each coordinator, milliseconds when the broker is there; after a broker restart the call
# can hang past the broker's return (above), and the runner resumes only once the deadline ends it, 20 s
# after the call. 10 s brought the runners back 16-17 s after the broker instead of 25-27 s, in one run
# that then stopped on a transaction the broker lost track of at its SIGKILL (README, chaos): kept at 15 s
# until more runs show that shorter is safe
_SEND_OFFSETS_S = 15.0


_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def _created(kafka: KafkaSettings, topic: str, within_s: float = 30.0) -> list[int]:
    """The partitions of a topic just created: the broker's metadata may not name it for a moment."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return partitions_of(kafka, topic)
        except LookupError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Runner:
    """Runs one processor as a member of its consumer group until `stop()`."""

    def __init__(
        self,
        kafka: KafkaSettings,
        app_id: str,
        processor: Processor,
        tick: Ticker | None = None,
        tick_s: float = 30.0,
        member: str = "",
    ) -> None:
        self.kafka, self.processor, self.tick, self.tick_s = kafka, processor, tick, tick_s
        self.member = member
        self.group = f"{app_id}-{processor.name}"
        self.changelog = TopicSpec(
            name=f"{app_id.removeprefix(kafka.topic_prefix)}-{processor.name}-state",
            key="state key",
            events=(),
            config=dict(COMPACTED_CONFIG),
        )
        self.changelog_topic = self.changelog.full_name(kafka.topic_prefix)
        # kept for the runner's life: each new incarnation's producer fences the one before. Under a member
        # name kept across restarts it is the same for the process started again after a crash, whose
        # init_transactions then aborts what the dead one left open at once: with a new id each time, that
        # transaction held the partitions' state and offsets until the broker aborted it,
        # transaction.timeout.ms later (a killed worker's partitions were derived again 36–71 s after)
        self.transactional_id = f"{self.group}-{member or uuid.uuid4().hex[:12]}"
        self.states: dict[str, State] = {}
        self.screens: dict[str, State] = {}  # recent idempotency keys per scope, apart from the processor's
        self.partition_of: dict[str, int] = {}  # the input (= changelog) partition each state belongs to
        self._stop = asyncio.Event()
        self.processed = 0
        self.incarnations = 0
        self.stall_after_s = stall_after_s(kafka.transaction_timeout_ms)
        metrics.known(processor.name)

    def stop(self) -> None:
        self._stop.set()

    def _check_partitions(self) -> None:
        """Refuse to start where a partition's state could not be where its input is: state is kept in the
        changelog's partition of the input's number, so inputs of different partition counts, or a changelog
        of fewer partitions (created by a worker whose PEERLOG_KAFKA_PARTITIONS was lower than the topics
        job's, or inputs grown since), restarted the processor without end on the first partition past the
        changelog's, and moved sessions' keys away from their state."""
        counts = {}
        for spec in self.processor.inputs:
            topic = spec.full_name(self.kafka.topic_prefix)
            try:
                counts[topic] = len(partitions_of(self.kafka, topic))
            except LookupError:
                continue  # not created yet: the consumer waits for it, as before
        have = len(_created(self.kafka, self.changelog_topic))
        if counts and (len(set(counts.values())) > 1 or have < max(counts.values())):
            shown = ", ".join(f"{t} {n}" for t, n in sorted(counts.items()))
            raise RuntimeError(
                f"{self.processor.name} cannot start: its inputs have {shown} partitions and its state topic "
                f"{self.changelog_topic} {have}; a processor keeps each input partition's state in the state "
                "topic's partition of the same number, so every input needs as many partitions and the state "
                "topic at least as many. Create the topics with one PEERLOG_KAFKA_PARTITIONS everywhere; "
                "partitions added to a running deployment are not supported (keys would move away from their state)"
            )

    async def run(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, create_topics, self.kafka, (self.changelog,))
        await asyncio.get_running_loop().run_in_executor(None, self._check_partitions)
        while not self._stop.is_set():
            try:
                await self._incarnation()
            except TransactionFailed as exc:
                log.warning("%s: %s; starting again from the committed offsets", self.group, exc)
                await asyncio.sleep(1)  # a log that keeps refusing is not hammered

    async def _incarnation(self) -> None:
        """Consume, decide and commit until stopped or until a transaction fails."""
        loop = asyncio.get_running_loop()
        self.incarnations += 1
        # its own threads for blocking Kafka calls: runners must not queue behind each other's polls,
        # and a call stuck in librdkafka must not hold up the next incarnation
        self._io = ThreadPoolExecutor(1, thread_name_prefix=f"{self.group}-{self.incarnations}")
        self.states.clear()
        self.screens.clear()
        self.partition_of.clear()
        self._assign_failure: Exception | None = None
        self.consumer = Consumer(self._consumer_config())
        try:
            self.producer = Producer(self._producer_config())
            await self._call(init_transactions, self.producer, 60)
            self.consumer.subscribe(
                [s.full_name(self.kafka.topic_prefix) for s in self.processor.inputs],
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
            )
            await self._loop(loop)
        finally:
            # leaving the group hands the partitions on; a consumer stuck with the broker is left behind,
            # and what ended this incarnation is what gets reported
            try:
                await _bounded(self.consumer.close, seconds=30)
            except (TransactionFailed, KafkaException) as exc:
                log.warning("%s: closing the consumer: %s", self.group, exc)
            self._io.shutdown(wait=False)

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A blocking transactional call with a timeout (the last arg): a Kafka error or a stall fails the
        transaction."""
        try:
            return await _bounded(fn, *args, seconds=args[-1] + _GRACE_S)
        except KafkaException as exc:
            raise TransactionFailed(f"{fn.__name__} failed: {exc.args[0].str()}{self._fenced_by(exc)}") from exc

    def _fenced_by(self, exc: KafkaException) -> str:
        """What to tell an operator when a live process took this runner's transactional id: with a member
        name, another worker started under the same instance id (each incarnation here fences only its own
        predecessor, whose producer is no longer used)."""
        if not self.member or exc.args[0].code() not in _FENCED:
            return ""
        log.error(
            "%s: fenced by another process under transactional id %s: does another worker run with the same "
            "PEERLOG_WORKER_INSTANCE_ID? Each worker needs its own; the two will keep fencing each other",
            self.group,
            self.transactional_id,
        )
        return " (fenced by another process with this worker's instance id)"

    async def _loop(self, loop) -> None:
        next_tick = time.monotonic() + self.tick_s
        quiet_since = time.monotonic()
        while not self._stop.is_set():
            msgs = await loop.run_in_executor(self._io, self.consumer.consume, self.processor.max_batch, 0.05)
            if self._assign_failure is not None:  # its records are not processed: the next incarnation reads them
                raise TransactionFailed(f"restoring the assigned partitions' state failed: {self._assign_failure}")
            records = [m for m in msgs if usable(m)]
            if records:
                await self._transact(records)
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > self.stall_after_s:
                await self._check_stall(loop)
                quiet_since = time.monotonic()
            if self.tick and time.monotonic() >= next_tick:
                next_tick = time.monotonic() + self.tick_s
                await self._ticked()

    async def _ticked(self) -> None:
        """The clock's tick. What it appends (a pair's flush, a dream request) is decided again from the
        states at the next one, so a tick the log refused is skipped: raised, it ended the runner and the
        worker with it during any broker outage longer than the side append's wait."""
        try:
            await self.tick(dict(self.states))
        except (AppendFailed, KafkaException, BufferError) as exc:  # BufferError: its queue filled meanwhile
            log.warning("%s: a clock tick could not append (%s); the next tick tries again", self.group, exc)

    async def _check_stall(self, loop) -> None:
        """End the incarnation if its consumer gets nothing though records wait (services/bus/stall.py)."""
        late = await loop.run_in_executor(self._io, probe, self.consumer)
        if late:
            metrics.STALLS.labels(component=self.processor.name).inc()
            raise TransactionFailed(
                f"the consumer delivered nothing for {self.stall_after_s:.0f} s though records wait: {', '.join(late)}"
            )

    async def _transact(self, records: list[Message]) -> None:
        began = False
        outputs: list[dict[str, Any]] = []
        try:
            # keys are independent: handle them concurrently (model calls overlap), each key in order
            by_key: dict[bytes, list[Message]] = {}
            for msg in records:
                by_key.setdefault(msg.key() or b"", []).append(msg)
            await _all_or_none(self._handle_in_order(msgs, outputs) for msgs in by_key.values())
            # produced only now: the broker opens the transaction at its first record, so it stays open
            # for the commit's round trips, not for the batch's model calls. An open transaction holds
            # up every read_committed reader of its partitions, and one left by a killed worker does so
            # until transaction.timeout.ms
            self.producer.begin_transaction()
            began = True
            for record in outputs:
                await self._produce(record)
            offsets = _next_offsets(records)
            meta = self.consumer.consumer_group_metadata()
            await self._call(self.producer.send_offsets_to_transaction, offsets, meta, _SEND_OFFSETS_S)
            await self._call(self.producer.commit_transaction, 60)
        except TransactionFailed:
            self._count_abort(began)
            raise  # the next incarnation's producer aborts it (fencing), whatever state this one is in
        except KafkaException as exc:  # the log, not the processor: the same
            self._count_abort(began)
            if exc.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE:
                _too_large(self.processor.name, outputs)
            raise TransactionFailed(f"the log refused the batch: {exc.args[0].str()}") from exc
        except AppendFailed as exc:
            # a processor's side append (progress markers, clock ticks) outlasted by a broker outage: the
            # log's fault too, so the batch is redone from the committed offsets rather than the worker
            # stopping (seen when a broker restart took over the side producer's 30 s)
            self._count_abort(began)
            if began:
                await self._call(self.producer.abort_transaction, 30)
            raise TransactionFailed(f"a side append failed: {exc}") from exc
        except BaseException:
            # a processor's failure: nothing of the batch may survive; abort, and let the process die
            self._count_abort(began)
            if began:
                await self._call(self.producer.abort_transaction, 30)
            raise
        self.processed += len(records)
        metrics.COMMITTED.labels(component=self.processor.name).inc()
        metrics.EVENTS.labels(processor=self.processor.name).inc(len(records))

    async def _produce(self, record: dict[str, Any]) -> None:
        """Produce one record of the open transaction. A batch can hold more records than the client's queue
        (100,000: the router's batch of 500 messages in a session of 200 observers): while it is full, wait
        for the records before this one to be delivered (BufferError ended the batch and the worker, and
        the same batch again after every restart)."""
        wait_s = self.kafka.transaction_timeout_ms / 1000  # the broker aborts the transaction by then anyway
        deadline = time.monotonic() + wait_s
        loop = asyncio.get_running_loop()
        while True:
            try:
                self.producer.produce(**record)
                return
            except BufferError:
                if time.monotonic() > deadline:
                    raise TransactionFailed(f"the Kafka client's queue stayed full for {wait_s:g} s") from None
                await loop.run_in_executor(self._io, self.producer.poll, 0.1)

    def _count_abort(self, began: bool) -> None:
        if began:  # a processor that fails does so before begin_transaction: nothing was open to abort
            metrics.ABORTED.labels(component=self.processor.name).inc()

    async def _handle_in_order(self, msgs: list[Message], outputs: list[dict[str, Any]]) -> None:
        for msg in msgs:
            await self._handle(msg, outputs)

    async def _handle(self, msg: Message, outputs: list[dict[str, Any]]) -> None:
        """Decide on one record: its events and changelog records go to `outputs`, its states to memory."""
        event = read_input(msg)
        if event is None or self._repeated(event, msg.partition(), outputs):
            return
        # the span continues the trace of the call or event that produced this record, and its output
        # records carry it on (W3C traceparent in their headers)
        with tracing.TRACER.start_as_current_span(
            f"{self.processor.name} {event.type}",
            context=tracing.context_from(msg.headers()),
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "kafka",
                "peerlog.processor": self.processor.name,
                "peerlog.event_id": event.event_id,
            },
            **tracing.QUIET_FAILURES,
        ) as span:
            try:
                step = await self.processor.handle(self.states.get, event)
            except Exception as error:
                tracing.failed(span, type(error).__name__)
                raise
            headers = tracing.record_headers()
        for out in step.events:
            topic = topic_for(out).full_name(self.kafka.topic_prefix)
            outputs.append(dict(topic=topic, value=encode(out), key=out.key.encode(), headers=headers))
        for key, state in step.states.items():
            outputs.extend(self._save_state(key, state, msg.partition()))

    def _repeated(self, event: Event, partition: int, outputs: list[dict[str, Any]]) -> bool:
        """True for an event of a later append under a used idempotency key, which the projector drops too:
        the retry of a write whose API died before its append was projected (services/api/idempotency.py)."""
        request = getattr(event, "request", None)
        if request is None:
            return False
        key = event.key + SCREEN_SUFFIX
        repeat, recent = screen(self.screens.get(key), request)
        if recent is not None:
            outputs.extend(self._save_state(key, recent, partition, self.screens))
        if repeat:
            log.warning(
                "%s: skipped %s %s of a repeated append under idempotency key %r",
                self.group,
                event.type,
                event.event_id,
                request.key,
            )
        return repeat

    def _save_state(
        self, key: str, state: State | None, partition: int, states: dict[str, State] | None = None
    ) -> list[dict[str, Any]]:
        """Keep `state` for `key` in memory (`states`, the processor's by default); the changelog record
        that persists it, if it changed."""
        states = self.states if states is None else states
        if state == states.get(key) and key in self.partition_of:
            return []
        # state lives on the changelog partition of the input it belongs to, so restoring a
        # partition's inputs restores exactly the state they need
        self.partition_of[key] = partition
        if state is None:
            states.pop(key, None)
        else:
            states[key] = state
        value = None if state is None else orjson.dumps(state)
        return [dict(topic=self.changelog_topic, value=value, key=key.encode(), partition=partition)]

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The partitions' states restored. A failure (the broker away, a changelog unread in time) is kept
        for `_loop` to end the incarnation with, not the worker; raised inside a librdkafka callback, it
        ended the whole process (and the client can be left in a broken state)."""
        try:
            self._restore(consumer, partitions)
        except Exception as exc:  # noqa: BLE001 - whatever it was, nothing may be processed without its state
            self._assign_failure = exc

    def _restore(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        started = time.monotonic()
        numbers = sorted({p.partition for p in partitions})
        # said before the waits as well as after: a runner stuck in one shows where it is
        log.info("%s assigning partitions %s", self.group, numbers)
        await_stable_offsets(self.kafka, consumer, partitions)
        stable = time.monotonic()
        await_closed_changelog(self.kafka, self.changelog_topic, numbers)
        closed = time.monotonic()
        for key, (part, state) in restore(self.kafka, self.changelog_topic, numbers).items():
            (self.screens if key.endswith(SCREEN_SUFFIX) else self.states)[key] = state
            self.partition_of[key] = part
        # the waits timed: the runner is silent while they last, and after a broker restart or a killed
        # worker they are what holds processing up
        log.info(
            "%s assigned partitions %s; %d states in memory (offsets stable after %.1f s, changelog closed "
            "after %.1f s, state read in %.1f s)",
            self.group,
            numbers,
            len(self.states),
            stable - started,
            closed - stable,
            time.monotonic() - closed,
        )

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {p.partition for p in partitions}
        gone = [k for k, p in self.partition_of.items() if p in revoked]
        for key in gone:
            self.states.pop(key, None)
            self.screens.pop(key, None)
            self.partition_of.pop(key, None)

    def _consumer_config(self) -> dict:
        return {
            **self.kafka.client_config(),
            "group.id": self.group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 20,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 2_000,
            "max.poll.interval.ms": max_poll_interval_ms(self.processor),
            # static membership (KIP-345): the member started again gets its partitions back at once, with
            # no rebalance and no wait for the dead one's session to expire
            **({"group.instance.id": self.member} if self.member else {}),
        }

    def _producer_config(self) -> dict:
        return {
            **self.kafka.client_config(),
            "enable.idempotence": True,
            "acks": "all",
            "transactional.id": self.transactional_id,
            "linger.ms": 2,
            # a transaction is open only while a batch commits (see _transact); this bounds how long
            # one left by a killed worker holds up readers of its partitions
            "transaction.timeout.ms": self.kafka.transaction_timeout_ms,
        }


async def _bounded(fn: Callable[..., Any], *args: Any, seconds: float) -> Any:
    """fn(*args) in a daemon thread, awaited for at most `seconds`. A call stuck in librdkafka is left
    behind in its thread, which cannot then hold up the process's exit as an executor's thread would."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(outcome: Callable[[Any], None], value: Any) -> None:
        if not future.done():
            outcome(value)

    def call() -> None:
        try:
            outcome, value = future.set_result, fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            outcome, value = future.set_exception, exc
        try:
            loop.call_soon_threadsafe(settle, outcome, value)
        except RuntimeError:
            pass  # the loop is gone (a call that returned after its runner stopped): no one is waiting

    threading.Thread(target=call, name=f"kafka-{fn.__name__}", daemon=True).start()
    try:
        return await asyncio.wait_for(asyncio.shield(future), seconds)
    except TimeoutError:
        # the call may still end, in error, after no one waits for it: read its outcome then, or asyncio
        # logs "Future exception was never retrieved" as an ERROR (seen after every broker restart)
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise TransactionFailed(f"{fn.__name__} did not return within {seconds:.0f} s") from None


def usable(msg: Message) -> bool:
    """True for a record; logs a consumer error (end-of-partition notices are not errors)."""
    err = msg.error()
    if err is None:
        return True
    if err.code() == KafkaError.FENCED_INSTANCE_ID:
        log.error("consumer fenced: another worker joined under this one's PEERLOG_WORKER_INSTANCE_ID (%s)", err)
    elif err.code() != KafkaError._PARTITION_EOF:
        log.warning("consumer error: %s", err)
    return False


def _next_offsets(records: list[Message]) -> list[TopicPartition]:
    last: dict[tuple[str, int], int] = {}
    for m in records:
        last[(m.topic(), m.partition())] = max(m.offset(), last.get((m.topic(), m.partition()), -1))
    return [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]


def _too_large(processor: str, outputs: list[dict[str, Any]]) -> None:
    """Say loudly which output a broker refused for its size: redone, the batch will be refused again, so
    the processor's state or output must be bounded (a bug to report, not an outage to wait out)."""
    biggest = max(outputs, key=lambda r: len(r.get("value") or b""), default=None)
    if biggest is not None:
        log.error(
            "%s: the broker refused a record of %d bytes (topic %s, key %r): a processor's output or state must "
            "stay under the broker's message.max.bytes; the batch will be redone and refused again",
            processor,
            len(biggest.get("value") or b""),
            biggest.get("topic"),
            (biggest.get("key") or b"")[:200],
        )


async def _all_or_none(handlers: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run a batch's keys concurrently; on the first failure the others are cancelled and awaited before it
    is raised. Left running (asyncio.gather does not cancel), a key's handler finished its model call after
    the next incarnation restored its states, and wrote the failed batch's state over them."""
    tasks = [asyncio.ensure_future(h) for h in handlers]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
