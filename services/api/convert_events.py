"""EventService's and WebhookService's protos ↔ domain: cursors, delivered events, webhooks, dead letters."""

from __future__ import annotations

from datetime import datetime

import orjson

from peerlog.v1 import events_pb2, webhooks_pb2
from services.bus.subscription import Delivered, Position
from services.errors import InvalidArgument
from services.webhooks.delivery import Endpoint
from services.webhooks.store import DeadLetter


def cursor_in(cursor: events_pb2.EventCursor) -> dict[Position, int]:
    positions: dict[Position, int] = {}
    for p in cursor.positions:
        if (p.topic, p.partition) in positions:
            raise InvalidArgument(f"cursor names {p.topic}/{p.partition} twice")
        positions[(p.topic, p.partition)] = p.offset
    return positions


def cursor_out(cursor: dict[Position, int]) -> events_pb2.EventCursor:
    return events_pb2.EventCursor(
        positions=[events_pb2.LogPosition(topic=t, partition=p, offset=o) for (t, p), o in sorted(cursor.items())]
    )


def subscribed_event(d: Delivered) -> events_pb2.SubscribedEvent:
    e = d.event
    return events_pb2.SubscribedEvent(
        type=e.type,
        schema_version=e.schema_version,
        event_id=e.event_id,
        key=e.key,
        position=events_pb2.LogPosition(topic=d.topic, partition=d.partition, offset=d.offset),
        json=orjson.dumps(e.model_dump(mode="json")).decode(),
        cursor=cursor_out(d.cursor),
    )


def webhook(endpoint: Endpoint, created_at: datetime) -> webhooks_pb2.Webhook:
    out = webhooks_pb2.Webhook(
        webhook_id=endpoint.endpoint_id,
        workspace_id=endpoint.workspace_id,
        url=endpoint.url,
        event_types=sorted(endpoint.types),
    )
    out.created_at.FromDatetime(created_at)
    return out


def dead_letter(d: DeadLetter) -> webhooks_pb2.WebhookDeadLetter:
    return webhooks_pb2.WebhookDeadLetter(
        event_id=d.event_id, event_type=d.event_type, json=d.body.decode(), attempts=d.attempts, error=d.error
    )
