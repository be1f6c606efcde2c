"""WebhookService over the real stack: a webhook registered, listed without its secret, its dead letter
shown and delivered on retry, deleted; refusals of a bad URL, unknown types and unknown webhooks, and of a
webhook past the workspace's limit; a URL deliveries cannot send to dead-letters its events, and a retry
answers why; dead letters listed a page at a time, each page a readable reply."""

from __future__ import annotations

import asyncio
import json
import time

import grpc
import httpx
import pytest

from peerlog.v1 import common_pb2, webhooks_pb2_grpc
from peerlog.v1 import webhooks_pb2 as wh
from services.cli.client import Client
from services.webhooks.delivery import Endpoint, RetryPolicy
from services.webhooks.signing import SIGNATURE_HEADER, verify
from services.webhooks.store import DeadLetter, WebhookStore, engine_for
from services.webhooks.worker import run_endpoint
from tests.support.rpc import rejected
from tests.support.wait import until_true
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


async def test_a_dead_letter_retry_naming_an_event_id_that_is_no_id_is_invalid_argument(channel):
    stub = webhooks_pb2_grpc.WebhookServiceStub(channel)
    await Client(channel).setup_conversation("w", "s", peers=("alice",))
    hook = (await stub.CreateWebhook(wh.CreateWebhookRequest(workspace_id="w", url="http://x.example.com/y"))).webhook
    ref = dict(workspace_id="w", webhook_id=hook.webhook_id)
    for event_id in ("a\x00b", "", "x" * 600):
        retry = stub.RetryWebhookDeadLetter(wh.RetryWebhookDeadLetterRequest(**ref, event_id=event_id))
        await rejected(retry, grpc.StatusCode.INVALID_ARGUMENT, "event_id", "is not a valid id")
    unknown = stub.RetryWebhookDeadLetter(wh.RetryWebhookDeadLetterRequest(**ref, event_id="0198a0b2-no-such-event"))
    await rejected(unknown, grpc.StatusCode.NOT_FOUND, "no dead letter")


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


async def test_a_stored_url_deliveries_cannot_send_to_dead_letters_each_event_and_a_retry_answers_why(
    channel, settings
):
    c, stub = Client(channel), webhooks_pb2_grpc.WebhookServiceStub(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    await c.add("w", "s", [("alice", "one"), ("alice", "two")])
    await rejected(
        stub.CreateWebhook(wh.CreateWebhookRequest(workspace_id="w", url="http://\u2603.example.com/hook")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "is not a URL deliveries can be sent to (InvalidURL: Invalid IDNA hostname",
    )
    # registered before CreateWebhook parsed URLs as deliveries do
    store, stop = WebhookStore(engine_for(settings.database)), asyncio.Event()
    store.register(Endpoint("wh_bad", "w", "http://\u2603.example.com/hook", b"k", frozenset({"MessageAppended"})))
    (endpoint,) = store.endpoints("w")
    async with httpx.AsyncClient() as client:
        # before, the first event's error ended the loop, and a restarted one ended on the same event
        task = asyncio.ensure_future(run_endpoint(endpoint, settings.kafka, store, client, stop, RetryPolicy()))
        await until_true(lambda: len(store.dead_letters("wh_bad")) == 2 or task.done())
        stop.set()
        await task
    dead = store.dead_letters("wh_bad")
    assert [d.attempts for d in dead] == [1, 1] and "Invalid IDNA hostname" in dead[0].error
    retried = await stub.RetryWebhookDeadLetter(
        wh.RetryWebhookDeadLetterRequest(workspace_id="w", webhook_id="wh_bad", event_id=dead[0].event_id)
    )
    assert not retried.delivered and "undeliverable: InvalidURL: Invalid IDNA hostname" in retried.error


async def test_a_workspace_past_its_webhook_limit_is_refused_until_it_deletes_one(channel):
    c, stub = Client(channel), webhooks_pb2_grpc.WebhookServiceStub(channel)
    for workspace in ("w", "v"):
        await c.workspace(workspace)
    made = [
        await stub.CreateWebhook(wh.CreateWebhookRequest(workspace_id="w", url=f"http://127.0.0.1:9/h{i}"))
        for i in range(20)  # PEERLOG_WEBHOOK_MAX_PER_WORKSPACE's default
    ]
    one_more = wh.CreateWebhookRequest(workspace_id="w", url="http://127.0.0.1:9/more")
    await rejected(
        stub.CreateWebhook(one_more),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "workspace 'w' already has 20 webhooks",
        "PEERLOG_WEBHOOK_MAX_PER_WORKSPACE",
    )
    assert len((await stub.ListWebhooks(wh.ListWebhooksRequest(workspace_id="w"))).webhooks) == 20
    await stub.CreateWebhook(wh.CreateWebhookRequest(workspace_id="v", url="http://127.0.0.1:9/h"))  # another's own
    await stub.DeleteWebhook(wh.DeleteWebhookRequest(workspace_id="w", webhook_id=made[0].webhook.webhook_id))
    await stub.CreateWebhook(one_more)


async def test_dead_letters_are_listed_a_page_at_a_time_each_reply_under_the_size_limit(channel, settings):
    stub = webhooks_pb2_grpc.WebhookServiceStub(channel)
    await Client(channel).workspace("w")
    store = WebhookStore(engine_for(settings.database))
    store.register(Endpoint("wh_big", "w", "http://127.0.0.1:9/", b"k"))
    # 45 events of 100 KB each: before, all in one reply of 4.5 MB, past a client's 4 MiB receive limit
    body = json.dumps({"content": "x" * 100_000}).encode()
    for i in range(45):
        store.advance("wh_big", {}, DeadLetter("wh_big", f"e{i:02}", "MessageAppended", body, 8, "Refused: HTTP 500"))
    ref = dict(workspace_id="w", webhook_id="wh_big")
    listed, token, replies = [], "", 0
    while True:
        got = await stub.ListWebhookDeadLetters(
            wh.ListWebhookDeadLettersRequest(**ref, page=common_pb2.PageRequest(page_token=token))
        )
        assert got.ByteSize() < 4 * 1024 * 1024
        listed += [d.event_id for d in got.dead_letters]
        token, replies = got.next_page_token, replies + 1
        if not token:
            break
    assert listed == [f"e{i:02}" for i in range(45)] and replies > 1
    first = await stub.ListWebhookDeadLetters(
        wh.ListWebhookDeadLettersRequest(**ref, page=common_pb2.PageRequest(page_size=10))
    )
    assert [d.event_id for d in first.dead_letters] == listed[:10] and first.next_page_token
    store.register(Endpoint("wh_other", "w", "http://127.0.0.1:9/", b"k"))
    await rejected(
        stub.ListWebhookDeadLetters(
            wh.ListWebhookDeadLettersRequest(
                workspace_id="w", webhook_id="wh_other", page=common_pb2.PageRequest(page_token=first.next_page_token)
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_token is not one this list issued",
    )


async def test_a_dead_letter_kept_at_an_older_schema_version_is_listed_and_retried_at_the_current_one(
    channel, settings
):
    # before: listed and sent as kept, so after an upgrade a receiver got v4 beside live deliveries' v5
    from datetime import UTC, datetime

    from services.events import MessageAppended, ProducerInfo

    stub = webhooks_pb2_grpc.WebhookServiceStub(channel)
    await Client(channel).workspace("w")
    event = MessageAppended(
        workspace_id="w",
        session_id="s",
        message_id="m1",
        peer_id="alice",
        content="one",
        created_at=datetime.now(UTC),
        producer=ProducerInfo(component="api", version="0"),
    )
    kept = event.model_dump(mode="json") | {"schema_version": 4}
    del kept["author_name"]  # what version 4 did not carry
    store = WebhookStore(engine_for(settings.database))
    with Receiver([200]) as receiver:
        store.register(Endpoint("wh_old", "w", receiver.url, b"k"))
        dead = DeadLetter(
            "wh_old", event.event_id, "MessageAppended", json.dumps(kept).encode(), 8, "Refused: HTTP 500"
        )
        store.advance("wh_old", {}, dead)
        ref = dict(workspace_id="w", webhook_id="wh_old")
        (listed,) = (await stub.ListWebhookDeadLetters(wh.ListWebhookDeadLettersRequest(**ref))).dead_letters
        assert json.loads(listed.json)["schema_version"] == MessageAppended.schema_version_current
        assert (
            await stub.RetryWebhookDeadLetter(wh.RetryWebhookDeadLetterRequest(**ref, event_id=event.event_id))
        ).delivered
        _, body, _ = receiver.received[-1]
    sent = json.loads(body)
    assert sent["schema_version"] == MessageAppended.schema_version_current and sent["content"] == "one"
    assert "author_name" in sent


async def test_a_workspaces_retries_past_its_limit_are_resource_exhausted_while_they_wait_on_a_silent_receiver(
    settings, projector
):
    # before: no bound, so one workspace's retries to a receiver that never answers took every call place
    import select
    import socket

    from services.api.server import start
    from services.webhooks.settings import WebhookSettings
    from tests.support.auth import admin_channel

    webhook = WebhookSettings(allow_private_targets=True, retries_per_workspace=1)
    server = await start(settings.model_copy(update={"webhook": webhook}))
    silent = socket.create_server(("127.0.0.1", 0))  # accepts connections, never answers
    store = WebhookStore(engine_for(settings.database))
    try:
        async with admin_channel(settings, server.port) as chan:
            stub = webhooks_pb2_grpc.WebhookServiceStub(chan)
            for workspace in ("w", "other"):
                await Client(chan).workspace(workspace)
                url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
                store.register(Endpoint(f"wh_{workspace}", workspace, url, b"k"))
                store.advance(
                    f"wh_{workspace}", {}, DeadLetter(f"wh_{workspace}", "e1", "MessageAppended", b"{}", 8, "x")
                )

            def retry(workspace: str):
                request = wh.RetryWebhookDeadLetterRequest(
                    workspace_id=workspace, webhook_id=f"wh_{workspace}", event_id="e1"
                )
                return stub.RetryWebhookDeadLetter(request)

            waiting = retry("w")
            # the first is waiting on the receiver once its connection is there (it took its place before)
            await until_true(lambda: select.select([silent], [], [], 0)[0], 10)
            await rejected(retry("w"), grpc.StatusCode.RESOURCE_EXHAUSTED, "RETRIES_PER_WORKSPACE")
            other = retry("other")  # another workspace still gets its place
            await asyncio.sleep(1.0)
            assert not other.done()
            assert "no answer" in (await waiting).error and not (await other).delivered
    finally:
        silent.close()
        await server.stop(0)
