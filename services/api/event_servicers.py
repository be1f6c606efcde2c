"""Thin gRPC servicer of EventService (peerlog's events for other services). Errors map in errors.py."""

from __future__ import annotations

from peerlog.v1 import events_pb2_grpc
from services.api import convert_events as c
from services.api import subscriptions
from services.api.context import ApiContext


class EventServicer(events_pb2_grpc.EventServiceServicer):
    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx

    async def Subscribe(self, request, context):
        async for delivered in subscriptions.subscribe(self.ctx, request.workspace_id, request.event_types,
                                                       c.cursor_in(request.cursor), request.from_end):
            yield c.subscribed_event(delivered)
