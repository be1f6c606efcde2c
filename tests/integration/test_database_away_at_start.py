"""A process that meets Postgres away (restarting, as a deploy or a crash restarts everything at once) waits
for it instead of exiting: the API at start, and the webhook process at start and while it runs. A chaos
run found both exiting. Postgres is reached through a proxy the tests cut, so the shared server stays up."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from projections.outages import DATABASE_AWAY
from services.api.channels import aio_channel
from services.api.server import start
from services.cli.client import Client
from services.webhooks.delivery import Endpoint, RetryPolicy
from services.webhooks.store import WebhookStore, engine_for
from services.webhooks.supervisor import supervise
from tests.support.auth import admin_token
from tests.support.tcp_proxy import database_behind_proxy
from tests.support.wait import until_true
from tests.support.webhook_receiver import Receiver, private_targets_allowed


@pytest.fixture
def cut(settings):
    """(proxy, settings reaching Postgres only through it), the proxy cut: Postgres is away."""
    proxy, behind = database_behind_proxy(private_targets_allowed(settings))
    proxy.cut()
    yield proxy, behind
    proxy.stop()


async def test_an_api_started_while_postgres_is_away_waits_and_serves_once_it_is_back(cut, projector):
    proxy, behind = cut
    starting = asyncio.ensure_future(start(behind))
    await asyncio.sleep(3)  # a dozen tries, 0.1 s doubling to 2 s apart
    assert not starting.done()  # before, start raised OperationalError here and the process exited

    proxy.restore()
    server = await asyncio.wait_for(starting, 30)
    try:
        async with aio_channel(f"127.0.0.1:{server.port}", admin_token(behind)) as channel:
            assert (await Client(channel).workspace("w")).workspace.workspace_id == "w"
    finally:
        await server.stop(0)


async def test_an_api_stopped_while_it_waits_for_postgres_at_start_stops_at_once(cut):
    _proxy, behind = cut
    stopping = threading.Event()
    starting = asyncio.ensure_future(start(behind, stopping))
    await asyncio.sleep(1)
    stopping.set()  # what SIGTERM sets
    with pytest.raises(DATABASE_AWAY):
        await asyncio.wait_for(starting, 5)


async def test_the_webhook_process_keeps_delivering_through_a_postgres_outage(channel, settings, cut):
    proxy, behind = cut
    proxy.restore()
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    direct = WebhookStore(engine_for(settings.database))
    stop = asyncio.Event()
    with Receiver() as receiver:
        direct.register(Endpoint("hook", "w", receiver.url, b"k", frozenset({"MessageAppended"})))
        through_proxy = WebhookStore(engine_for(behind.database))
        policy = RetryPolicy(attempts=30, first_wait_s=0.05, timeout_s=0.5)
        task = asyncio.ensure_future(supervise(behind, through_proxy, stop, refresh_s=0.2, policy=policy))
        await c.add("w", "s", [("alice", "before")])
        await until_true(lambda: len(receiver.delivered()) == 1)

        proxy.cut()
        await c.add("w", "s", [("alice", "during")])
        await asyncio.sleep(2)  # ten rounds of the endpoint list unreadable
        assert not task.done()  # before, the first unreadable round ended the process

        proxy.restore()
        await until_true(lambda: "during" in _contents(receiver), timeout=30)
        stop.set()
        await asyncio.wait_for(task, 30)
    # at least once, as documented: an outage between a delivery's 2xx and its progress write sends it again
    assert list(dict.fromkeys(_contents(receiver))) == ["before", "during"]


def _contents(receiver: Receiver) -> list[str]:
    return [json.loads(b)["content"] for b in receiver.delivered()]
