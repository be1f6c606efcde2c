"""What a runner does before it takes over partitions: wait until no earlier owner's transaction is still
pending on their input offsets or open on their changelog, then read their state from the changelog."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaException, TopicPartition

from services.bus.settings import KafkaSettings
from services.bus.streams import open_transactions, to_the_end

State = dict[str, Any]

_STABLE_MARGIN_S = 30.0  # beyond transaction.timeout.ms, for the broker to abort and write its markers


class TransactionFailed(Exception):
    """The log refused or stalled a transaction; nothing of it is visible and this incarnation is over."""


def await_closed_changelog(kafka: KafkaSettings, changelog_topic: str, partitions: list[int]) -> None:
    """Wait until no transaction is open on the assigned partitions' changelog, before the state is
    read from it. Only a previous owner writes there, so an open transaction is one it left: a worker
    killed between producing and committing leaves it open until the broker aborts it, and until then
    a read_committed reader stops at its first record, before every state change committed after it
    (by the owner in between, say). The committed offsets do not wait for it (it sent none), so state
    read then was older than the offsets it resumed from, and the pending messages of the changes it
    missed were never derived: 395 messages in a chaos run with two worker kills 35 s apart
    (tests/bench/README.md). The wait is bounded like await_stable_offsets'."""
    wait_s = kafka.transaction_timeout_ms / 1000 + _STABLE_MARGIN_S
    try:
        still_open = open_transactions(kafka, changelog_topic, partitions, wait_s=wait_s)
    except KafkaException as exc:
        raise TransactionFailed(f"the changelog's ends are unreadable: {exc.args[0].str()}") from exc
    if still_open:
        raise TransactionFailed(
            f"a transaction stayed open on {changelog_topic} {still_open}; if it stays open, the broker "
            f"lost track of it: `peerlog topics abort-open {changelog_topic} {still_open[0]}`"
        )


def await_stable_offsets(kafka: KafkaSettings, consumer: Consumer, partitions: list[TopicPartition]) -> None:
    """Wait until no transaction of a previous owner of these partitions is pending, before its state
    is restored. The state is read to the changelog's last stable offset: read while a previous owner's
    commit was still in flight, it missed that commit's state changes, and the offsets the commit then
    made stable skipped their inputs (the likely cause of 26 messages never derived and 90 derived twice
    in a chaos run with four deriver instances and broker restarts, tests/bench/results/
    chaos-5k-before-stable-wait.json). A read_committed consumer's offset fetch waits while a
    transactional offset commit is pending (KIP-447); a transaction that never ends is aborted by the
    broker after transaction.timeout.ms, so the wait is bounded a little beyond that."""
    if not partitions:
        return
    try:
        consumer.committed(partitions, timeout=kafka.transaction_timeout_ms / 1000 + _STABLE_MARGIN_S)
    except KafkaException as exc:
        raise TransactionFailed(
            f"the assigned partitions' offsets did not become stable: {exc.args[0].str()}; if they stay so, "
            "a transaction the broker lost track of left them pending: `peerlog topics abort-open __consumer_offsets`"
        ) from exc


def restore(kafka: KafkaSettings, topic: str, partitions: Sequence[int]) -> dict[str, tuple[int, State]]:
    """The latest state per key on some changelog partitions (committed records only), with the partition
    it is on. One reader for all of them: with a reader of its own per partition, an assignment of three
    partitions of 1,000 records each took 3.3 s to restore, one after the other; now 0.11 s."""
    states: dict[str, tuple[int, State]] = {}
    if not partitions:
        return states
    for m in to_the_end(kafka, topic, partitions):
        key = m.key().decode()
        if m.value() is None:
            states.pop(key, None)
        else:
            states[key] = (m.partition(), orjson.loads(m.value()))
    return states
