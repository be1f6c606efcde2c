"""A consumer that stops fetching, and how the runner notices it.

Seen in the chaos bench (tests/bench/chaos.py) with librdkafka 2.16: a consumer that lived through a
broker restart went on polling and got nothing, for an hour, though its partitions held hundreds of
committed records; consumers created after the restart fetched them at once. The runner cannot mend the
client, but it can notice: after `stall_after_s` without a record, it compares each assigned partition's
position with the partition's end, and a consumer that is behind ends its incarnation like a failed
transaction does (a new consumer and producer resume from the committed offsets).

A false alarm costs one restart of the incarnation, nothing more: the end is the last stable offset for a
read_committed consumer, but a transaction left open on an input by a killed producer holds it back for
up to transaction.timeout.ms, so the check waits twice that long.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition

PROBE_TIMEOUT_S = 10.0


def stall_after_s(transaction_timeout_ms: int) -> float:
    """How long a runner polls without a record before it checks for a stall."""
    return max(60.0, 2 * transaction_timeout_ms / 1000)


def behind(
    positions: Sequence[TopicPartition],
    committed: Mapping[tuple[str, int], int],
    ends: Mapping[tuple[str, int], tuple[int, int]],
) -> list[str]:
    """The partitions with records the consumer has not delivered: its next offset (the position, or the
    committed offset before anything was consumed, or the start with neither) is below the end.
    `ends` maps each partition to its (low, end) watermarks."""
    late = []
    for tp in positions:
        where = (tp.topic, tp.partition)
        low, end = ends[where]
        at = max(tp.offset if tp.offset >= 0 else committed.get(where, -1), low)
        if at < end:
            late.append(f"{tp.topic}[{tp.partition}] at {at} of {end}")
    return late


def probe(consumer: Consumer) -> list[str]:
    """`behind` for the consumer's assignment, asked of the broker (blocking, bounded); an unreadable
    committed offset counts as behind: the group coordinator is what holds the consumer up."""
    parts = consumer.assignment()
    if not parts:
        return []
    try:
        committed = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(parts, timeout=PROBE_TIMEOUT_S)}
        ends = {
            (tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=PROBE_TIMEOUT_S, cached=False)
            for tp in parts
        }
    except KafkaException as exc:
        return [f"offsets unreadable: {exc.args[0].str()}"]
    return behind(consumer.position(parts), committed, ends)
