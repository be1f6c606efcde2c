"""Thin gRPC servicers of EventService and WebhookService (peerlog's events for other services). Errors map in
errors.py."""

from __future__ import annotations

from peerlog.v1 import events_pb2_grpc, webhooks_pb2, webhooks_pb2_grpc
from services.api import convert_events as c
from services.api import subscriptions, webhooks
from services.api.deps import ApiDeps
from services.api.guards import require_workspace
from services.api.slots import holding
from services.webhooks.settings import WebhookSettings
from services.webhooks.store import WebhookStore


class EventServicer(events_pb2_grpc.EventServiceServicer):
    def __init__(self, ctx: ApiDeps, max_streams: int = 100, max_streams_per_workspace: int = 10) -> None:
        self.ctx, self.streams = ctx, subscriptions.Streams(max_streams, max_streams_per_workspace)

    async def Subscribe(self, request, context):
        with self.streams.one(request.workspace_id):
            async for delivered in subscriptions.subscribe(
                self.ctx, request.workspace_id, request.event_types, c.cursor_in(request.cursor), request.from_end
            ):
                yield c.subscribed_event(delivered)


class WebhookServicer(webhooks_pb2_grpc.WebhookServiceServicer):
    def __init__(self, ctx: ApiDeps, store: WebhookStore, settings: WebhookSettings) -> None:
        self.ctx, self.store = ctx, store
        self.allow_private, self.most = settings.allow_private_targets, settings.max_per_workspace
        self.retrying = webhooks.running_retries(settings.retries_per_workspace)

    async def CreateWebhook(self, request, context):
        types = list(request.event_types)
        webhooks.check_request(request.workspace_id, request.url, types)  # what needs no lookup first
        await require_workspace(self.ctx, request.workspace_id)  # NOT_FOUND, as for every write there
        await webhooks.check_room(self.store, request.workspace_id, self.most)
        await webhooks.check_target(request.url, self.allow_private)
        endpoint, created_at, secret = await webhooks.create(
            self.store, request.workspace_id, request.url, types, self.most
        )
        return webhooks_pb2.CreateWebhookResponse(webhook=c.webhook(endpoint, created_at), secret=secret)

    async def ListWebhooks(self, request, context):
        found = await webhooks.listed(self.store, request.workspace_id)
        return webhooks_pb2.ListWebhooksResponse(webhooks=[c.webhook(e, at) for e, at in found])

    async def DeleteWebhook(self, request, context):
        await webhooks.delete(self.store, request.workspace_id, request.webhook_id)
        return webhooks_pb2.DeleteWebhookResponse()

    async def ListWebhookDeadLetters(self, request, context):
        found = await webhooks.dead_letters(
            self.ctx,
            self.store,
            request.workspace_id,
            request.webhook_id,
            request.page.page_size,
            request.page.page_token,
        )
        return webhooks_pb2.ListWebhookDeadLettersResponse(
            dead_letters=[c.dead_letter(d.letter) for d in found.items], next_page_token=found.next_token
        )

    async def RetryWebhookDeadLetter(self, request, context):
        with holding((self.retrying, request.workspace_id)):
            outcome = await webhooks.retry(
                self.store, request.workspace_id, request.webhook_id, request.event_id, self.allow_private
            )
        return webhooks_pb2.RetryWebhookDeadLetterResponse(delivered=outcome.delivered, error=outcome.error)
