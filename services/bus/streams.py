"""Faust plumbing shared by the processors: raw-bytes topics, tables, and reading records as events."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import faust

from services.bus.topics import TopicSpec, topic_for
from services.config import KafkaSettings
from services.events import Event, EventDecodeError, decode, encode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Wiring:
    """What a processor's `register` gets to declare its topics, tables and agents on."""

    app: faust.App
    kafka: KafkaSettings

    def topic(self, spec: TopicSpec) -> faust.TopicT:
        # raw bytes both ways: the events module owns serialisation, not Faust
        return self.app.topic(
            spec.full_name(self.kafka.topic_prefix), key_type=bytes, value_type=bytes,
            key_serializer="raw", value_serializer="raw", partitions=self.kafka.partitions,
        )

    def sender(self, *specs: TopicSpec):
        """An async `send(event)` that puts each event on its own topic (inside the agent's transaction)."""
        topics = {spec.name: self.topic(spec) for spec in specs}

        async def send(event: Event) -> None:
            await topics[topic_for(event).name].send(key=event.key.encode(), value=encode(event))

        return send

    def table(self, name: str) -> faust.Table:
        """A changelog-backed table of JSON values, partitioned like the processor's input topic."""
        return self.app.Table(name, default=None, partitions=self.kafka.partitions, key_type=str)


def read(raw: bytes) -> Event | None:
    """Decode a record. An unreadable one is logged and skipped, as the projector quarantines it:
    stopping would hold up every other key on the partition behind one bad record."""
    try:
        return decode(raw)
    except EventDecodeError as exc:
        log.error("skipping unreadable record: %s", exc)
        return None
