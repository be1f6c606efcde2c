"""The webhook process's supervisor over real Kafka and Postgres: an endpoint registered while it runs
gets deliveries, and a deleted one gets no more."""

from __future__ import annotations

import asyncio
import json

import pytest

from services.cli.client import Client
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
            settings, store, stop, refresh_s=0.2, policy=RetryPolicy(attempts=2, first_wait_s=0.05, timeout_s=0.5)
        )
    )
    with Receiver() as receiver:
        store.register(Endpoint("hook-late", "w", receiver.url, b"k", frozenset({"MessageAppended"})))
        await until_true(lambda: len(receiver.delivered()) == 1)
        store.delete("hook-late")
        await asyncio.sleep(1)  # the supervisor has seen the deletion
        await c.add("w", "s", [("bob", "two")])
        await asyncio.sleep(2)
        stop.set()
        await task
    assert [json.loads(b)["content"] for b in receiver.delivered()] == ["one"]
