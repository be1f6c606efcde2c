"""Prometheus metrics of the log's transactions. Recorded where a transaction ends, never inside a processor."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

COMMITTED = Counter("peerlog_kafka_transactions_committed_total", "Kafka transactions committed", ["component"])
ABORTED = Counter(
    "peerlog_kafka_transaction_aborts_total",
    "Kafka transactions that were begun and then aborted, or left for the next producer to fence",
    ["component"],
)
GROUPED = Histogram(
    "peerlog_kafka_writes_per_transaction",
    "Writes (calls) committed together in one transaction of the API's log (group commit)",
    ["component"],
    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32),
)
EVENTS = Counter("peerlog_processor_events_total", "Input records a processor committed", ["processor"])
STALLS = Counter(
    "peerlog_consumer_stalls_total",
    "Incarnations ended because their consumer delivered nothing while records waited",
    ["component"],
)


def known(component: str) -> None:
    """Show this component's series at 0 from the start, so a rate over them exists before the first abort."""
    COMMITTED.labels(component=component)
    ABORTED.labels(component=component)
    STALLS.labels(component=component)
