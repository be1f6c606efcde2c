"""The projector's lag gauges: records behind per topic (summed over partitions) and seconds behind."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from confluent_kafka import TopicPartition
from prometheus_client import REGISTRY

from projections.apply import Record
from projections.metrics import LagGauges


class Consumer:
    """Positions and cached high watermarks per (topic, partition)."""

    def __init__(self, positions: dict[tuple[str, int], int], highs: dict[tuple[str, int], int]) -> None:
        self.positions, self.highs = positions, highs

    def assignment(self):
        return [TopicPartition(t, p) for t, p in self.positions]

    def position(self, partitions):
        return [TopicPartition(p.topic, p.partition, self.positions[(p.topic, p.partition)]) for p in partitions]

    def get_watermark_offsets(self, partition, cached):
        assert cached  # no broker round trip from the projector's loop
        return 0, self.highs[(partition.topic, partition.partition)]


def _gauge(name: str, topic: str) -> float:
    return REGISTRY.get_sample_value(name, {"topic": topic})


def test_lag_is_summed_per_topic_and_aged_from_the_newest_applied_record():
    gauges = LagGauges(["lag.a", "lag.b"], every_s=0)
    assert _gauge("peerlog_projector_lag_records", "lag.a") == 0
    logged = datetime.now(UTC) - timedelta(seconds=30)
    gauges.applied([Record("lag.a", 0, 9, "k", b"", logged), Record("lag.a", 1, 3, "k", b"", logged - timedelta(1))])
    # lag.a: 5 + 2 behind; lag.b: caught up; an unknown position (-1001: nothing consumed yet) is left out
    gauges.measure(
        Consumer(
            {("lag.a", 0): 10, ("lag.a", 1): 4, ("lag.b", 0): 7, ("lag.b", 1): -1001},
            {("lag.a", 0): 15, ("lag.a", 1): 6, ("lag.b", 0): 7, ("lag.b", 1): 50},
        )
    )
    assert _gauge("peerlog_projector_lag_records", "lag.a") == 7
    assert 30 <= _gauge("peerlog_projector_lag_seconds", "lag.a") < 40
    assert _gauge("peerlog_projector_lag_records", "lag.b") == 0
    assert _gauge("peerlog_projector_lag_seconds", "lag.b") == 0


def test_measuring_is_throttled():
    gauges = LagGauges(["lag.c"], every_s=3600)
    gauges.measure(Consumer({("lag.c", 0): 1}, {("lag.c", 0): 4}))
    gauges.measure(Consumer({("lag.c", 0): 1}, {("lag.c", 0): 9}))  # within the hour: not measured again
    assert _gauge("peerlog_projector_lag_records", "lag.c") == 3
