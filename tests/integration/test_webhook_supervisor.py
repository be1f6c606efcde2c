"""The webhook process's supervisor over real Kafka and Postgres: an endpoint registered while it runs
gets deliveries, and a deleted one gets no more, at once, even mid-retry, without holding up the others or
the process's stop; receivers that never answer hold up no other webhook's deliveries."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from services.cli.client import Client
from services.webhooks import supervisor
from services.webhooks.delivery import Endpoint, RetryPolicy
from services.webhooks.store import WebhookStore, engine_for
from services.webhooks.supervisor import supervise
from tests.support.wait import until_true
from tests.support.webhook_receiver import Receiver, private_targets_allowed


@pytest.fixture
def settings(settings):  # noqa: F811 - the conftest fixture, with private webhook targets allowed
    """The receiver listens on 127.0.0.1, which webhooks may reach only with the setting on."""
    return private_targets_allowed(settings)


async def test_endpoints_registered_while_it_runs_get_deliveries_and_deleted_ones_stop(channel, settings):
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    await c.add("w", "s", [("alice", "one")])
    store, stop = WebhookStore(engine_for(settings.database)), asyncio.Event()
    task = asyncio.ensure_future(
        supervise(
            settings, store, stop, refresh_s=0.2, policy=RetryPolicy(attempts=2, first_wait_s=0.05, timeout_s=3.0)
        )
    )
    with Receiver() as receiver:
        store.register(Endpoint("hook-late", "w", receiver.url, b"k", frozenset({"MessageAppended"})))
        await until_true(lambda: len(receiver.delivered()) == 1)
        store.delete("hook-late")
        await asyncio.sleep(3)  # the supervisor has seen the deletion (it looks every 0.2 s)
        await c.add("w", "s", [("bob", "two")])
        await asyncio.sleep(2)
        stop.set()
        await task
    assert [json.loads(b)["content"] for b in receiver.delivered()] == ["one"]


async def test_a_deleted_webhook_mid_retry_stops_posting_at_once_without_holding_up_the_others_or_the_stop(
    channel, settings
):
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    await c.add("w", "s", [("alice", f"m{i}") for i in range(3)])
    store, stop = WebhookStore(engine_for(settings.database)), asyncio.Event()
    # each event retried for some 30 s: before, a deletion waited that out for every event of the batch,
    # and the supervisor with it
    slow_to_give_up = RetryPolicy(attempts=100, first_wait_s=0.3, max_wait_s=0.3, timeout_s=1)
    task = asyncio.ensure_future(supervise(settings, store, stop, refresh_s=0.2, policy=slow_to_give_up))
    with Receiver([500] * 1000) as deleted, Receiver([500] * 1000) as failing, Receiver() as good:
        for hook, receiver in (("hook-deleted", deleted), ("hook-failing", failing)):
            store.register(Endpoint(hook, "w", receiver.url, b"k", frozenset({"MessageAppended"})))
        await until_true(lambda: deleted.received and failing.received)
        store.delete("hook-deleted")
        store.register(Endpoint("hook-new", "w", good.url, b"k", frozenset({"MessageAppended"})))
        await until_true(lambda: len(good.delivered()) == 3, timeout=10)  # started while the other stops
        posted = len(deleted.received)
        await asyncio.sleep(1)  # three of the deleted webhook's retry intervals
        assert len(deleted.received) == posted, "the deleted webhook is still being POSTed to"
        assert failing.received[-1][2] == 500  # still retrying its first event: the stop abandons that
        stop.set()
        started = time.monotonic()
        await asyncio.wait_for(task, 5)
    assert time.monotonic() - started < 3
    assert store.dead_letters("hook-deleted") == [] and store.cursor("hook-deleted") == {}
    assert store.cursor("hook-failing") == {}  # nothing recorded for the delivery abandoned


async def test_receivers_that_never_answer_do_not_hold_up_another_webhooks_deliveries(channel, settings, monkeypatch):
    c = Client(channel)
    for workspace in ("attacker", "victim"):
        await c.setup_conversation(workspace, "s", peers=("alice",))
        await c.add(workspace, "s", [("alice", "one")])
    answer = asyncio.Event()
    held = []

    async def tarpit(reader, writer):  # accepts, reads, answers nothing until the test ends
        held.append(writer)
        await answer.wait()
        writer.close()

    server = await asyncio.start_server(tarpit, "127.0.0.1", 0)
    tarpit_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    # a pool of 2 connections stands in for httpx's 100, so that two webhooks' requests can fill it
    monkeypatch.setattr(
        supervisor, "delivery_client", lambda allow_private: httpx.AsyncClient(limits=httpx.Limits(max_connections=2))
    )
    store, stop = WebhookStore(engine_for(settings.database)), asyncio.Event()
    # 10 s without an answer per attempt: the healthy webhook would wait that long for a connection
    task = asyncio.ensure_future(supervise(settings, store, stop, refresh_s=0.2, policy=RetryPolicy(timeout_s=10)))
    try:
        with Receiver() as good:
            for n in range(2):
                store.register(Endpoint(f"hook-tarpit-{n}", "attacker", tarpit_url, b"k"))
            await until_true(lambda: len(held) == 2)
            store.register(Endpoint("hook-good", "victim", good.url, b"k", frozenset({"MessageAppended"})))
            await until_true(lambda: good.delivered(), timeout=6)
            stop.set()
            await task
    finally:
        answer.set()
        server.close()
        await server.wait_closed()
