"""WebhookService over the real stack: a webhook registered, listed without its secret, its dead letter
shown and delivered on retry, deleted; refusals of a bad URL, unknown types and unknown webhooks."""

from __future__ import annotations

import asyncio
import json
import time

import grpc
import httpx
import pytest

from peerlog.v1 import webhooks_pb2 as wh
from peerlog.v1 import webhooks_pb2_grpc
from services.cli.client import Client
from services.webhooks.delivery import RetryPolicy
from services.webhooks.signing import SIGNATURE_HEADER, verify
from services.webhooks.store import WebhookStore, engine_for
from services.webhooks.worker import run_endpoint
from tests.support.rpc import rejected
from tests.support.webhook_receiver import Receiver, private_targets_allowed


@pytest.fixture
def settings(settings):  # noqa: F811 - the conftest fixture, with private webhook targets allowed
    """The receiver listens on 127.0.0.1, which webhooks may reach only with the setting on."""
    return private_targets_allowed(settings)


async def test_a_webhook_is_registered_listed_its_dead_letter_retried_and_deleted(channel, settings):
    c, stub = Client(channel), webhooks_pb2_grpc.WebhookServiceStub(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    await c.add("w", "s", [("alice", "one")])
    with Receiver([500, 500]) as receiver:
        made = await stub.CreateWebhook(
            wh.CreateWebhookRequest(workspace_id="w", url=receiver.url, event_types=["MessageAppended"])
        )
        hook = made.webhook
        assert made.secret.startswith("whsec_") and hook.webhook_id.startswith("wh_")
        listed = await stub.ListWebhooks(wh.ListWebhooksRequest(workspace_id="w"))
        assert [(h.webhook_id, h.url, list(h.event_types)) for h in listed.webhooks] == [
            (hook.webhook_id, receiver.url, ["MessageAppended"])
        ]
        # the worker's loop, run here for one event: two failed attempts dead-letter it
        store, stop = WebhookStore(engine_for(settings.database)), asyncio.Event()
        (endpoint,) = store.endpoints("w")
        async with httpx.AsyncClient() as client:
            task = asyncio.ensure_future(
                run_endpoint(
                    endpoint,
                    settings.kafka,
                    store,
                    client,
                    stop,
                    RetryPolicy(attempts=2, first_wait_s=0.05, timeout_s=0.5),
                )
            )
            async with asyncio.timeout(30):
                while not store.dead_letters(hook.webhook_id):
                    await asyncio.sleep(0.1)
            stop.set()
            await task
        ref = dict(workspace_id="w", webhook_id=hook.webhook_id)
        (dead,) = (await stub.ListWebhookDeadLetters(wh.ListWebhookDeadLettersRequest(**ref))).dead_letters
        assert json.loads(dead.json)["content"] == "one" and dead.attempts == 2 and dead.error == "Refused: HTTP 500"
        retried = await stub.RetryWebhookDeadLetter(wh.RetryWebhookDeadLetterRequest(**ref, event_id=dead.event_id))
        assert (
            retried.delivered
            and not (await stub.ListWebhookDeadLetters(wh.ListWebhookDeadLettersRequest(**ref))).dead_letters
        )
        headers, body, _ = receiver.received[-1]
        assert verify(made.secret.encode(), headers[SIGNATURE_HEADER], body, time.time())
    await stub.DeleteWebhook(wh.DeleteWebhookRequest(**ref))
    assert not (await stub.ListWebhooks(wh.ListWebhooksRequest(workspace_id="w"))).webhooks
    await rejected(stub.DeleteWebhook(wh.DeleteWebhookRequest(**ref)), grpc.StatusCode.NOT_FOUND, hook.webhook_id)


async def test_bad_urls_and_unknown_event_types_are_refused(channel):
    stub = webhooks_pb2_grpc.WebhookServiceStub(channel)
    await rejected(
        stub.CreateWebhook(wh.CreateWebhookRequest(workspace_id="w", url="ftp://x/y")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "http(s)",
    )
    await rejected(
        stub.CreateWebhook(wh.CreateWebhookRequest(workspace_id="w", url="http://x/y", event_types=["Nope"])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Nope",
    )
