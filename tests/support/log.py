"""Read events straight off the log (read_committed), as a downstream consumer would see them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer

from services.bus.topics import TopicSpec
from services.events import Event, decode
from services.settings import Settings


def read_events(
    settings: Settings,
    spec: TopicSpec,
    until: Callable[[list[Event]], bool],
    timeout: float = 60.0,
    settle: float = 0.0,
) -> list[Event]:
    """Every committed event on `spec` once `until(events)` holds (then `settle` s more); fail after timeout."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka.bootstrap_servers,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([spec.full_name(settings.kafka.topic_prefix)])
    events: list[Event] = []
    deadline, settled_at = time.monotonic() + timeout, None
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.2):
                if msg.error() is None:
                    events.append(decode(msg.value()))
            if settled_at is None and until(events):
                settled_at = time.monotonic() + settle
            if settled_at is not None and time.monotonic() >= settled_at:
                return events
        raise AssertionError(f"condition on {spec.name} not met within {timeout} s; saw {len(events)} events")
    finally:
        consumer.close()
