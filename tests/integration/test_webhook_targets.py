"""Webhook URLs that point at the server's own network (issue 13, SSRF) over the real stack: refused at
registration after DNS resolution, and refused again at delivery, where the connection is made, so a name
that turns private after registration (DNS rebinding) gets nothing. PEERLOG_WEBHOOK_ALLOW_PRIVATE_TARGETS
lets them through."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from contextlib import contextmanager

import grpc
import pytest

from peerlog.v1 import webhooks_pb2 as wh
from peerlog.v1 import webhooks_pb2_grpc
from services.api.channels import aio_channel
from services.cli.client import Client
from services.webhooks import targets
from services.webhooks.delivery import Endpoint, RetryPolicy
from services.webhooks.store import WebhookStore, engine_for
from services.webhooks.targets import delivery_client
from services.webhooks.worker import run_endpoint
from tests.support.auth import admin_token
from tests.support.rpc import rejected
from tests.support.webhook_receiver import Receiver, private_targets_allowed

THREE_TRIES = RetryPolicy(attempts=3, first_wait_s=0.05, timeout_s=2)


@pytest.mark.parametrize(
    "url, why",
    [
        ("http://127.0.0.1:8080/hook", "127.0.0.1 is loopback"),
        ("http://localhost:8080/hook", "localhost resolves to a non-public address (loopback)"),
        ("http://[::1]/hook", "::1 is loopback"),
        ("http://[::ffff:127.0.0.1]/hook", "is loopback"),
        ("http://10.0.0.7/hook", "10.0.0.7 is private"),
        ("http://192.168.0.1/hook", "192.168.0.1 is private"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a cloud metadata address"),
        ("http://169.254.1.1/hook", "169.254.1.1 is link-local"),
        ("https://0.0.0.0/hook", "0.0.0.0 is unspecified"),
    ],
)
async def test_a_url_on_a_non_public_address_is_refused_and_nothing_is_registered(channel, url, why):
    stub = webhooks_pb2_grpc.WebhookServiceStub(channel)
    await Client(channel).workspace("w")
    await rejected(
        stub.CreateWebhook(wh.CreateWebhookRequest(workspace_id="w", url=url)),
        grpc.StatusCode.INVALID_ARGUMENT,
        why,
        "PEERLOG_WEBHOOK_ALLOW_PRIVATE_TARGETS",
    )
    assert not (await stub.ListWebhooks(wh.ListWebhooksRequest(workspace_id="w"))).webhooks


async def test_with_the_setting_on_a_private_url_is_registered(settings, projector):
    from services.api.server import start

    server = await start(private_targets_allowed(settings))
    try:
        async with aio_channel(f"127.0.0.1:{server.port}", admin_token(settings)) as chan:
            await Client(chan).workspace("w")
            made = await webhooks_pb2_grpc.WebhookServiceStub(chan).CreateWebhook(
                wh.CreateWebhookRequest(workspace_id="w", url="http://127.0.0.1:8080/hook")
            )
            assert made.webhook.url == "http://127.0.0.1:8080/hook"
    finally:
        await server.stop(0)


async def test_a_refused_host_name_does_not_reveal_its_resolved_address(channel, caplog):
    # with the address a workspace token could map the server's network: which names exist, where they point
    stub = webhooks_pb2_grpc.WebhookServiceStub(channel)
    await Client(channel).workspace("w")
    with caplog.at_level(logging.INFO, logger=targets.__name__), pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.CreateWebhook(wh.CreateWebhookRequest(workspace_id="w", url="http://localhost:8080/hook"))
    shown = err.value.details()
    assert "localhost resolves to a non-public address (loopback)" in shown
    assert "127.0.0.1" not in shown and "::1" not in shown
    # the operator still learns where it pointed, once
    (logged,) = [r.getMessage() for r in caplog.records if r.name == targets.__name__]
    assert "'localhost'" in logged and ("127.0.0.1" in logged or "::1" in logged)


async def _deliver_first(
    settings, endpoint_id: str, url: str, allow_private: bool, done, policy: RetryPolicy = THREE_TRIES
) -> list:
    """Run one endpoint's delivery loop until the workspace's first event is delivered (`done()`) or
    dead-lettered; its dead letters."""
    store, stop = WebhookStore(engine_for(settings.database)), asyncio.Event()
    endpoint = Endpoint(endpoint_id, "w", url, b"k", frozenset({"MessageAppended"}))
    # registered straight in the store: as if the name had resolved to a public address at registration
    store.register(endpoint)
    async with delivery_client(allow_private) as client:
        task = asyncio.ensure_future(run_endpoint(endpoint, settings.kafka, store, client, stop, policy))
        async with asyncio.timeout(30):
            while not (store.dead_letters(endpoint_id) or done()):
                await asyncio.sleep(0.1)
        stop.set()
        await task
    return store.dead_letters(endpoint_id)


async def test_a_name_that_resolves_to_loopback_at_delivery_gets_nothing_and_the_event_is_dead_lettered(
    channel, settings
):
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    await c.add("w", "s", [("alice", "one")])
    with Receiver() as receiver:
        rebound = receiver.url.replace("127.0.0.1", "localhost")
        (dead,) = await _deliver_first(settings, "checked", rebound, False, lambda: receiver.received)
        assert receiver.received == []  # not even a connection that reached the handler
        # refused at the first attempt: an address refused now is refused on every retry
        assert dead.attempts == 1 and "refused: localhost resolves to a non-public address (loopback)" in dead.error
        assert "127.0.0.1" not in dead.error and "::1" not in dead.error  # a dead letter's reader sees no address
        # the same URL with private targets allowed is delivered: the check refused it, not the receiver
        assert await _deliver_first(settings, "allowed", rebound, True, lambda: receiver.delivered()) == []
        assert len(receiver.delivered()) == 1


@contextmanager
def _silent(port: int):
    """127.0.0.2:`port` dropping every SYN, as a dead address does: a listener whose accept queue is full."""
    listener, held = socket.socket(), []
    listener.bind(("127.0.0.2", port))
    listener.listen(0)
    try:
        for _ in range(3):
            held.append(socket.socket())
            held[-1].setblocking(False)
            held[-1].connect_ex(("127.0.0.2", port))
        time.sleep(0.3)
        with pytest.raises(TimeoutError):  # neither accepted nor refused: the test needs it so
            socket.create_connection(("127.0.0.2", port), timeout=0.5).close()
        yield
    finally:
        for sock in (*held, listener):
            sock.close()


async def test_a_name_whose_first_address_never_answers_is_delivered_through_its_next_one(
    channel, settings, monkeypatch
):
    # tried alone, the silent address took every attempt whole and the event was dead-lettered, while curl
    # (Happy Eyeballs) reached the receiver through the name's next address
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    await c.add("w", "s", [("alice", "one")])

    async def two_addresses(host, port):
        return ["127.0.0.2", "127.0.0.1"] if host == "receiver.test" else await resolve(host, port)

    resolve = targets.resolve
    monkeypatch.setattr(targets, "resolve", two_addresses)
    monkeypatch.setattr(targets, "check_addresses", lambda host, addresses: None)  # as if both were public
    five_s = RetryPolicy(attempts=2, first_wait_s=0.05, timeout_s=5)  # longer than a dead address's share
    with Receiver() as receiver, _silent(receiver.server_address[1]):
        url = receiver.url.replace("127.0.0.1", "receiver.test")
        assert await _deliver_first(settings, "two", url, False, lambda: receiver.delivered(), five_s) == []
        assert len(receiver.delivered()) == 1
