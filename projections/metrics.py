"""Prometheus metrics of the projections: how far the projector trails the log, what it parked, and the work the
log describes.

Lag is measured by the projector's own loop (its consumer knows positions and high watermarks); the counts
of derivations, dreams and dead letters are read from the projected tables when Prometheus scrapes.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from confluent_kafka import Consumer
from prometheus_client import REGISTRY, Counter, Gauge, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import Engine, exists, func, or_, select
from sqlalchemy.exc import SQLAlchemyError

from projections.apply import Record
from projections.schema import dead_letters, derivation_batches, dreams, perceptions
from projections.settings import ProjectorSettings
from projections.status_reads import BATCH_STATES, DREAM_STATES, outstanding

log = logging.getLogger(__name__)

LAG_RECORDS = Gauge(
    "peerlog_projector_lag_records",
    "Records on the log not yet applied (a partition's high "
    "watermark minus the projector's position; a closing transaction marker counts as one)",
    ["topic"],
)
LAG_SECONDS = Gauge(
    "peerlog_projector_lag_seconds",
    "While records wait: seconds since the newest applied record of the topic was logged; 0 when caught up",
    ["topic"],
)
# a parked record is never projected: the lag gauges pass over it, and a write the API acknowledged never
# becomes readable; this is what shows it
QUARANTINED = Counter(
    "peerlog_projector_quarantined_total",
    "Records the projector parked in its quarantine table (unreadable, or refused when applied) and so never projected",
    ["topic"],
)


class QuarantineCounter:
    """Counts the records the projector parked, by topic."""

    def __init__(self, topics: Sequence[str]) -> None:
        for topic in topics:  # every topic shows from the start, at 0, so a rise is seen from the first one
            QUARANTINED.labels(topic=topic)

    def parked(self, records: Sequence[Record]) -> None:
        for r in records:
            QUARANTINED.labels(topic=r.topic).inc()


class LagGauges:
    """Updates the lag gauges from the projector's consumer, at most once per `every_s`."""

    def __init__(self, topics: Sequence[str], every_s: float = 1.0) -> None:
        self.every_s = every_s
        self._next = 0.0
        self._logged: dict[str, datetime] = {}
        for topic in topics:  # every topic shows from the start, caught up until measured otherwise
            LAG_RECORDS.labels(topic=topic).set(0)
            LAG_SECONDS.labels(topic=topic).set(0)

    def applied(self, records: Sequence[Record]) -> None:
        for r in records:
            if r.logged_at is not None and (r.topic not in self._logged or r.logged_at > self._logged[r.topic]):
                self._logged[r.topic] = r.logged_at

    def measure(self, consumer: Consumer) -> None:
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self.every_s
        behind: dict[str, int] = defaultdict(int)
        for p in consumer.position(consumer.assignment()):
            # cached: the watermarks of the last fetch response, no broker round trip
            _, high = consumer.get_watermark_offsets(p, cached=True)
            if p.offset >= 0 and high >= 0:
                behind[p.topic] += max(high - p.offset, 0)
        now = datetime.now(UTC)
        for topic, records in behind.items():
            LAG_RECORDS.labels(topic=topic).set(records)
            logged = self._logged.get(topic)
            LAG_SECONDS.labels(topic=topic).set((now - logged).total_seconds() if records and logged else 0)


def _pending_derivations():
    """Perceived messages that no derivation batch has taken up yet."""
    # one row per batched message, so the anti-join hashes on the message too: matched by `= any(message_ids)`
    # it could hash on the pair only, each perception against each batch of its pair (8.8 s at 32,000 perceptions)
    b = derivation_batches.c
    batched = select(
        b.workspace_id, b.observer_id, b.observed_id, func.unnest(b.message_ids).label("message_id")
    ).subquery("batched")
    p, m = perceptions.c, batched.c
    taken = exists().where(
        m.workspace_id == p.workspace_id,
        m.observer_id == p.observer_id,
        m.observed_id == p.observed_id,
        m.message_id == p.message_id,
    )
    return select(func.count()).select_from(perceptions).where(~taken)


def _batches_by_state():
    """Batches by state, as GetProcessingStatus sees them: a dead-lettered batch whose messages a retry has
    derived since, in batches of its own, is parked no more. Counted raw, it kept the gauge above 0 (and
    any alert on it firing) for good after such a retry."""
    b = derivation_batches.c
    return select(b.state, func.count()).where(or_(b.state != "dead_lettered", outstanding(b))).group_by(b.state)


class ProjectionCounts(Collector):
    """Derivations, dreams and dead letters as the projections hold them, counted at each scrape."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            with self.engine.connect() as conn:
                pending = conn.scalar(_pending_derivations())
                batches = dict(conn.execute(_batches_by_state()).all())
                dreamt, parked = (
                    dict(conn.execute(select(column, func.count()).group_by(column)).all())
                    for column in (dreams.c.state, dead_letters.c.kind)
                )
        except SQLAlchemyError as exc:  # a scrape must not fail the projector; the gap shows in Prometheus
            log.warning("projection metrics not read: %s", exc)
            return
        yield GaugeMetricFamily(
            "peerlog_derivations_pending_messages",
            "Perceived messages no derivation batch has taken up yet",
            value=pending,
        )
        yield _by_label(
            "peerlog_derivation_batches",
            "Derivation batches by state (in_flight: the model call is under way; dead_lettered: parked, with a"
            " message no retry has derived since)",
            "state",
            {**dict.fromkeys(BATCH_STATES, 0), **batches},
        )
        yield _by_label("peerlog_dreams", "Dreams by state", "state", {**dict.fromkeys(DREAM_STATES, 0), **dreamt})
        yield _by_label(
            "peerlog_dead_letters",
            "Work ever parked on a dead-letter topic, by kind",
            "kind",
            {"derivation": 0, "summary": 0, **parked},
        )


def _by_label(name: str, documentation: str, label: str, counts: dict[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for value, count in counts.items():
        family.add_metric([value], count)
    return family


def serve(settings: ProjectorSettings, engine: Engine) -> None:
    """Serve this process's metrics on settings.metrics_port (when set) in a daemon thread."""
    if not settings.metrics_port:
        return
    REGISTRY.register(ProjectionCounts(engine))
    start_http_server(settings.metrics_port, addr=settings.metrics_host)
