"""Prometheus metrics of the log's transactions. Recorded where a transaction ends, never inside a processor."""

from __future__ import annotations

from prometheus_client import Counter

COMMITTED = Counter("peerlog_kafka_transactions_committed_total", "Kafka transactions committed", ["component"])
ABORTED = Counter(
    "peerlog_kafka_transaction_aborts_total",
    "Kafka transactions aborted or left to be fenced: reason log (the broker refused or stalled it) or "
    "processor (the processor failed; nothing of the batch survives)",
    ["component", "reason"],
)
EVENTS = Counter("peerlog_processor_events_total", "Input records a processor committed", ["processor"])


def known(component: str) -> None:
    """Show this component's series at 0 from the start, so a rate over them exists before the first abort."""
    COMMITTED.labels(component=component)
    for reason in ("log", "processor"):
        ABORTED.labels(component=component, reason=reason)
