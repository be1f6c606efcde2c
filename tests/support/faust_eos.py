"""Faust exactly-once for agents that re-key: output goes in the transaction of its *source* partition.

What breaks in faust-streaming 0.15.3 (``processing_guarantee="exactly_once"``)
------------------------------------------------------------------------------
Faust keeps one transactional producer per assigned source partition, with the id
``{app id}-{topic group}-{partition}``, and commits each partition's consumed offsets through the
producer of that id (``TransactionManager.commit``, faust/transport/consumer.py). But
``TransactionManager.send`` chooses the producer from the record being *sent*: it hashes the output
key to the output topic's partition and takes the output topic's group. So output is committed with
the offsets of whatever source partition happens to share that id, not with the input it came from:

1. Output to a topic the app does not consume: ``key_partition`` finds no metadata for it and returns
   None, so ``send`` passes no transactional id and the record goes through the plain, non-transactional
   producer. It is visible at once; a worker killed before the next commit re-reads the input after a
   restart and writes the output again (read_committed readers see duplicates).
2. Output to a consumed topic with the same partition count (Faust groups topics by partition count):
   the record joins the transaction of source partition ``hash(output key)``. A crash between two of the
   per-partition commits (they run one after another) keeps output whose input offsets were not
   committed (duplicates), and can commit input offsets whose output is aborted (loss).
3. Output to a consumed topic of another partition count: the record joins the transaction of the
   *output* topic's own partition, which commits only together with offsets consumed from that topic.
   Its readers are read_committed, so they never see the record that would give them an offset to
   commit: the output stays in an open transaction until the broker aborts it (the worker "stops
   committing"; the output is lost).

Independently of re-keying, Faust's commit timer runs beside the agents and commits through every
transaction whatever is in it, so a commit can land while a handler has sent part of an event's output
(or, through the producer buffer, its table writes) and the event is not acked yet: that output commits
without its input offset. Seen in the stock runs of tests/integration/test_faust_exactly_once.py: the
handler that waits 1.5 s after its send before the SIGKILL had its table increment committed, so after
the restart the table counted that input twice. Also, in exactly_once mode Faust does not drain the
producer buffer (where table writes wait) before it commits.

The fix: ``SourcePartitionTransactionManager`` (with ``Producer`` and ``Transport``)
-----------------------------------------------------------------------------------
- ``send`` during the handling of an event (``faust.current_event()``) uses the transactional producer
  of the event's source partition; the output partition is still chosen from the output key. Sends with
  no current event (timers, the buffer task publishing table writes) keep the stock choice; Faust pins
  a table write to the partition of the event that made it, so it lands in the same transaction.
- The manager remembers, per transactional id, the highest source offset per partition whose output
  is in the open transaction (recorded at ``send``, and at ``send_soon`` for table writes, together
  with the buffered write until it is delivered). A commit drains the producer buffer, then commits a
  transaction only when the offsets it commits cover all of those; otherwise it holds those offsets and
  retries at the next round (or from its own timer when no newer acks come, because Faust already
  counts held offsets as committed). The check and the commit run under the producer's per-id lock,
  the lock ``send`` takes, so no output slips in between.
- A transaction held for more than ``HOLD_MAX_S`` commits anyway, with a warning naming the uncovered
  partitions, so a partition whose offset Faust does not advance does not let the broker abort the
  transaction (aiokafka's 60 s transaction timeout) and fence the worker. Those events alone fall back
  to at-least-once.
- Output waits (up to ``PRODUCER_WAIT_S``) for its source partition's transactional producer, which a
  rebalance may still be starting when the agents already handle events; taking another producer there
  is exactly the defect.
- Written as subclasses so it can be offered upstream as a change to ``TransactionManager.send`` and
  ``commit``; it reads two private attributes of Faust's aiokafka ``Producer``
  (``_transaction_producers``, ``_trn_locks``) and ``Consumer._commit_fut``, all present in 0.15.3.

What the fix does not cover: Faust's restart
--------------------------------------------
Seen in the SIGKILL tests, stock and fixed alike (so exactly-once on Faust is not reached yet):
- A record skipped after a restart. The restarted worker handled the first record of a partition that
  had no committed offset while its table was still recovering (before "Worker ready"), then went on
  at the record after next: the trace reads "handled 0 from 3@0", "handled 8 from 3@2", and input "2"
  at 3@1 (handled by the killed incarnation, whose transaction was aborted) was never handled again.
  Faust then committed past it, so its output was lost. Faust's gap bookkeeping
  (``Consumer._drain_messages`` counts a jump between two records read as a gap of offsets no record
  occupies; ``_new_offset`` commits over gaps) would explain the commit; why offset 1 was skipped is
  not pinned down.
- Once, with the fix (after_output test), one input's output twice in the sink, in a run where another
  partition's committed offset also stayed at 1: cause not found.
- An offset that stops advancing: in other runs a partition's committed offset stayed below its end
  for minutes after the restart (stock and fixed). With the fix this held a transaction that also
  carried that partition's output until the broker aborted it (60 s) and fenced the producer; hence
  ``HOLD_MAX_S``.

Model calls (slow handlers)
---------------------------
A source partition's transaction cannot commit from the first output of an event until that event is
acked. So a handler that calls a model must finish the call before it sends anything (or writes a
table) for that event: compute, then produce. Then the transaction never waits on the model; a commit
round holds a partition only for the moment between the handler's first send and its ack. A handler
that sends and then awaits a model keeps that partition's transaction open, and its offsets
uncommitted, for the whole call, up to ``HOLD_MAX_S``; past it the commit goes ahead and that event
is only at-least-once. Measured once each (the rekey app of the tests with 60 inputs, every tenth
input waiting 8 s, ``broker_commit_livelock_soft_timeout=5``): wait then send, exactly once, 4 held
commit rounds; send then wait, exactly once in that run but 37 held rounds and one commit forced after
16 s. Neither logged a livelock warning. Faust fetches on its own consumer thread, so a slow handler
does not miss the poll interval; aiokafka's transaction timeout (60 s) is the hard bound on a hold,
which is why ``HOLD_MAX_S`` sits well under it.

Use: call ``register()`` once, then build the app with ``broker=f"{SCHEME}://host:port"`` and
``processing_guarantee="exactly_once"``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Mapping
from typing import Any

from faust.exceptions import ProducerSendError
from faust.streams import current_event
from faust.transport import drivers
from faust.transport.consumer import TransactionManager
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.tuples import FutureMessage, RecordMetadata
from mode import Service

log = logging.getLogger(__name__)

# the broker URL scheme of the transport below, e.g. "kafka-eos://127.0.0.1:9092"
SCHEME = "kafka-eos"
# how long a commit waits for buffered table writes to reach their transaction before it skips a round
BUFFERED_WAIT_S = 5.0
# how long a transaction may be held for output its offsets do not cover (under aiokafka's 60 s timeout)
HOLD_MAX_S = 15.0
# how long output waits for its source partition's transactional producer to start after a rebalance
PRODUCER_WAIT_S = 30.0


class SourcePartitionTransactionManager(TransactionManager):
    """A transaction manager that commits each event's output with that event's own offset."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # transactional id -> source partition -> highest offset whose output is in the open transaction
        self._sources: dict[str, dict[TP, int]] = defaultdict(dict)
        # transactional id -> buffered writes (a table's changelog) not yet delivered to the broker
        self._buffered: dict[str, set[asyncio.Future]] = defaultdict(set)
        # transactional id -> offsets a commit round held back (Faust already counts them committed)
        self._held: dict[str, dict[TP, int]] = {}
        self._held_since: dict[str, float] = {}  # transactional id -> when a commit round first held it

    def source_of_current_event(self) -> tuple[str, TP, int] | None:
        """(transactional id, partition, offset) of the event being handled, if it came from our source."""
        event = current_event()
        if event is None:
            return None
        tp = event.message.tp
        try:
            group = self.app.assignor.group_for_topic(tp.topic)
        except KeyError:  # an event from a channel or a topic outside the assignment
            return None
        return f"{self.app.conf.id}-{group}-{tp.partition}", tp, event.message.offset

    async def _wait_for_producer(self, transactional_id: str) -> None:
        # Agents may handle an event while the rebalance is still starting the transactional producers;
        # falling back to another producer there would put the output in another partition's transaction.
        deadline = asyncio.get_running_loop().time() + PRODUCER_WAIT_S
        if transactional_id not in self.producer._transaction_producers:
            log.info("output waits for transactional producer %s to start", transactional_id)
        while transactional_id not in self.producer._transaction_producers:
            if asyncio.get_running_loop().time() > deadline:
                raise ProducerSendError(f"no transactional producer {transactional_id} after {PRODUCER_WAIT_S} s")
            await asyncio.sleep(0.05)

    def note_output(self, transactional_id: str, tp: TP, offset: int) -> None:
        """Record that output of the event at `offset` of `tp` is (about to be) in the open transaction."""
        sources = self._sources[transactional_id]
        sources[tp] = max(sources.get(tp, -1), offset)

    def note_buffered(self, transactional_id: str, fut: asyncio.Future) -> None:
        """Hold commits of `transactional_id` until the buffered write `fut` is delivered."""
        pending = self._buffered[transactional_id]
        pending.add(fut)
        fut.add_done_callback(pending.discard)

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        timestamp: float | None,
        headers: Any,
        *,
        transactional_id: str | None = None,
    ) -> Awaitable[RecordMetadata]:
        """Send in the transaction of the source partition of the event being handled, if any."""
        source = self.source_of_current_event()
        if source is None:
            return await super().send(topic, key, value, partition, timestamp, headers)
        # recorded before the send queues on the lock: a commit in between sees it and waits a round
        self.note_output(*source)
        await self._wait_for_producer(source[0])
        return await self.producer.send(
            topic,
            key,
            value,
            self.consumer.key_partition(topic, key, partition),
            timestamp,
            headers,
            transactional_id=source[0],
        )

    async def send_and_wait(self, *args: Any, **kwargs: Any) -> RecordMetadata:
        """Send (in the source partition's transaction) and wait for the broker's acknowledgement."""
        return await (await self.send(*args, **kwargs))

    async def on_rebalance(self, assigned: set[TP], revoked: set[TP], newly_assigned: set[TP]) -> None:
        """Forget the open transactions of revoked partitions: their next owner fences and aborts them."""
        for transactional_id in self._tps_to_transactional_ids(revoked):
            for state in (self._sources, self._buffered, self._held, self._held_since):
                state.pop(transactional_id, None)
        await super().on_rebalance(assigned, revoked, newly_assigned)

    @Service.task
    async def _retry_held(self) -> None:
        # Faust marks offsets committed even when a round held them back, and calls `commit` again only
        # for newer acks: an idle stream would leave the held transaction open until the broker aborts it.
        async for _ in self.itertimer(self.app.conf.broker_commit_interval, name="eos-held-commits"):
            if self._held and self.consumer._commit_fut is None:
                await self.commit({})

    async def commit(self, offsets: Mapping[TP, int], start_new_transaction: bool = True) -> bool:
        """Commit each source partition's transaction whose offsets cover all the output in it."""
        by_id: dict[str, dict[TP, int]] = defaultdict(dict, {tid: {} for tid in self._held})
        for tp, offset in offsets.items():
            by_id[f"{self.app.conf.id}-{self.app.assignor.group_for_topic(tp.topic)}-{tp.partition}"][tp] = offset
        await self._drain_buffer()
        committed = [await self._commit_one(tid, tps, start_new_transaction) for tid, tps in by_id.items()]
        return all(committed)

    async def _drain_buffer(self) -> None:
        """Let buffered table writes of acked events enter their transactions before committing."""
        try:
            await self.producer.buffer.flush()
        except RuntimeError as stopped:  # the producer is stopping: what is left waits for a later commit
            log.info("commit without draining the producer buffer: %s", stopped)

    async def _commit_one(self, transactional_id: str, offsets: dict[TP, int], start_new: bool) -> bool:
        producer = self.producer
        txn = producer._transaction_producers.get(transactional_id)
        if txn is None:  # revoked meanwhile: the partition's next owner re-reads from the last commit
            log.warning("no transactional producer %s to commit %s", transactional_id, offsets)
            return False
        if self._buffered[transactional_id]:
            await asyncio.wait(list(self._buffered[transactional_id]), timeout=BUFFERED_WAIT_S)
        async with producer._trn_locks[transactional_id]:
            offsets = {**self._held.pop(transactional_id, {}), **offsets}  # newer offsets win
            waiting = self._waiting(transactional_id, offsets)
            if waiting and not self._held_too_long(transactional_id, waiting):
                log.debug("%s: commit held, output not covered yet: %s", transactional_id, waiting)
                self._held[transactional_id] = offsets
                return False
            self._held_since.pop(transactional_id, None)
            return await self._commit_transaction(transactional_id, txn, offsets, start_new)

    def _held_too_long(self, transactional_id: str, waiting: object) -> bool:
        # Faust may not advance a partition's offset at all (see "What the fix does not cover"): past
        # HOLD_MAX_S the transaction commits anyway, before the broker's transaction timeout aborts it.
        now = asyncio.get_running_loop().time()
        since = self._held_since.setdefault(transactional_id, now)
        if now - since < HOLD_MAX_S:
            return False
        log.warning(
            "%s: committing after %.0f s although output is not covered by the offsets (%s): "
            "those events may be handled again after a crash",
            transactional_id,
            now - since,
            waiting,
        )
        return True

    async def _commit_transaction(
        self, transactional_id: str, txn: Any, offsets: dict[TP, int], start_new: bool
    ) -> bool:
        try:
            if offsets:
                await txn.send_offsets_to_transaction(offsets, self.app.conf.id)
            await txn.commit_transaction()
            self._sources.pop(transactional_id, None)
            if start_new:
                await txn.begin_transaction()
        except faust_aiokafka.ProducerFenced as fenced:
            log.warning("producer %s fenced: %s", transactional_id, fenced)
            await self.app.crash(fenced)
            return False
        return True

    def _waiting(self, transactional_id: str, offsets: Mapping[TP, int]) -> dict[TP, int] | str | None:
        """What keeps the transaction from committing `offsets` (the next offsets to read), if anything."""
        if self._buffered[transactional_id]:
            return f"{len(self._buffered[transactional_id])} buffered writes in flight"
        sources = self._sources.get(transactional_id, {})
        return {tp: offset for tp, offset in sources.items() if offsets.get(tp, -1) <= offset} or None


class Producer(faust_aiokafka.Producer):
    """Faust's aiokafka producer; a table write made while handling an event holds that event's commit."""

    def send_soon(self, fut: FutureMessage) -> None:
        """Buffer `fut`; its source partition's transaction does not commit before it is delivered."""
        manager = self.app.consumer.transactions if self.app.in_transaction else None
        source = manager.source_of_current_event() if manager is not None else None
        if source is not None:
            manager.note_output(*source)
            manager.note_buffered(source[0], fut)
        super().send_soon(fut)


class Transport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with the source-partition transaction manager and producer."""

    Producer = Producer
    TransactionManager = SourcePartitionTransactionManager


def register() -> None:
    """Make the ``kafka-eos://`` broker scheme select this transport (idempotent)."""
    drivers.TRANSPORTS.aliases[SCHEME] = f"{__name__}:Transport"
