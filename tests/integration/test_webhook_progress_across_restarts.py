"""The webhook delivery loop over real Kafka and Postgres: one endpoint's events delivered in order through
a failure and a timeout, progress kept in Postgres so a restarted loop neither repeats nor loses one, and
a dead letter kept, visible and delivered on retry; nothing written for a webhook once it is deleted."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import httpx
import pytest

from services.bus.topics import SESSIONS
from services.cli.client import Client
from services.errors import FailedPrecondition
from services.webhooks.delivery import Endpoint, RetryPolicy
from services.webhooks.store import DeadLetter, WebhookStore, engine_for
from services.webhooks.worker import retry_dead_letter, run_endpoint
from tests.integration.test_subscribe_events import append_keyed
from tests.support.wait import until_true
from tests.support.webhook_receiver import Receiver

FAST = RetryPolicy(attempts=3, first_wait_s=0.05, max_wait_s=0.2, timeout_s=0.5)


def contents(bodies) -> list[str]:
    return [json.loads(b)["content"] for b in bodies]


class Loop:
    """run_endpoint as a task that can be stopped and started again, as a worker restart does."""

    def __init__(self, endpoint, settings, store, client) -> None:
        self.args, self.stop, self.task = (endpoint, settings.kafka, store, client), asyncio.Event(), None

    def start(self) -> Loop:
        self.stop = asyncio.Event()
        self.task = asyncio.ensure_future(run_endpoint(*self.args, self.stop, FAST))
        return self

    async def halt(self) -> None:
        self.stop.set()
        await self.task


async def test_a_restarted_delivery_loop_resumes_after_its_last_delivery_without_repeats(channel, settings):
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    await c.add("w", "s", [("alice", "one"), ("bob", "two")])
    store = WebhookStore(engine_for(settings.database))
    with Receiver([500, "hang"]) as receiver:
        endpoint = Endpoint("hook-1", "w", receiver.url, b"secret", frozenset({"MessageAppended"}))
        store.register(endpoint)
        assert store.endpoints("w") == [endpoint]
        async with httpx.AsyncClient() as client:
            loop = Loop(endpoint, settings, store, client).start()
            await until_true(lambda: len(receiver.delivered()) == 2)
            await loop.halt()
            await c.add("w", "s", [("alice", "three")])  # while no loop runs
            loop.start()
            await until_true(lambda: len(receiver.delivered()) == 3)
            await asyncio.sleep(1)  # anything repeated would arrive by now
            await loop.halt()
    assert contents(receiver.delivered()) == ["one", "two", "three"]
    assert [status for *_, status in receiver.received] == [500, "hung", 204, 204, 204]
    assert store.dead_letters("hook-1") == []


async def test_a_dead_letter_is_kept_and_delivered_on_retry_while_later_events_go_on(channel, settings):
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    await c.add("w", "s", [("alice", "one"), ("bob", "two")])
    store = WebhookStore(engine_for(settings.database))
    with Receiver([500, 500, 500]) as receiver:
        endpoint = Endpoint("hook-2", "w", receiver.url, b"secret", frozenset({"MessageAppended"}))
        store.register(endpoint)
        async with httpx.AsyncClient() as client:
            loop = Loop(endpoint, settings, store, client).start()
            await until_true(lambda: len(receiver.delivered()) == 1)
            await loop.halt()
            (dead,) = store.dead_letters("hook-2")
            assert contents([dead.body]) == ["one"] and dead.attempts == 3 and dead.error == "Refused: HTTP 500"
            assert await retry_dead_letter(endpoint, store, client, dead.event_id, FAST)
    assert contents(receiver.delivered()) == ["two", "one"] and store.dead_letters("hook-2") == []


def test_a_webhook_deleted_while_its_loop_finishes_an_event_keeps_no_progress_or_dead_letter(settings):
    store = WebhookStore(engine_for(settings.database))
    store.register(Endpoint("hook-3", "w", "http://hooks.example.com/", b"secret"))
    letter = DeadLetter("hook-3", "e1", "MessageAppended", b"{}", 3, "Refused: HTTP 500")
    store.advance("hook-3", {("t", 0): 5}, letter)
    assert store.cursor("hook-3") == {("t", 0): 5} and store.dead_letters("hook-3") == [letter]
    store.delete("hook-3")
    # the loop, not yet stopped, records the event it was on: before, these rows outlived the webhook
    store.advance("hook-3", {("t", 0): 6}, replace(letter, event_id="e2"))
    assert store.cursor("hook-3") == {} and store.dead_letters("hook-3") == []


async def test_a_webhook_whose_progress_is_past_the_logs_end_stops_and_says_so_instead_of_skipping_events(
    channel, settings
):
    """Its progress from a log since re-created, or restored from an older copy: before, the loop jumped to
    the end and every event written up to that offset was never delivered, with nothing in any log."""
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    await c.add("w", "s", [("alice", "one")])
    store = WebhookStore(engine_for(settings.database))
    ahead = {(SESSIONS.full_name(settings.kafka.topic_prefix), p): 1000 for p in range(settings.kafka.partitions)}
    with Receiver() as receiver:
        endpoint = Endpoint("hook-4", "w", receiver.url, b"secret", frozenset({"MessageAppended"}))
        store.register(endpoint)
        store.advance("hook-4", ahead)
        async with httpx.AsyncClient() as client:
            with pytest.raises(FailedPrecondition, match="webhook hook-4 holds its deliveries") as stopped:
                async with asyncio.timeout(10):
                    await run_endpoint(endpoint, settings.kafka, store, client, asyncio.Event(), FAST)
    assert "beyond the log's end" in str(stopped.value) and "webhook_progress" in str(stopped.value)
    assert receiver.received == [] and store.cursor("hook-4") == ahead  # nothing skipped, for when the log is back


async def test_a_webhook_is_posted_a_keyed_write_once_though_a_retry_appended_it_twice(channel, settings):
    """The retry's copy, with ids peerlog itself drops, was POSTed too: by a running loop, and by one
    restarted from progress stored after the first copy."""
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    store = WebhookStore(engine_for(settings.database))
    append_keyed(settings, ["kept"], "first")
    with Receiver() as receiver:
        endpoint = Endpoint("hook-5", "w", receiver.url, b"secret", frozenset({"MessageAppended"}))
        store.register(endpoint)
        async with httpx.AsyncClient() as client:
            loop = Loop(endpoint, settings, store, client).start()
            await until_true(lambda: len(receiver.delivered()) == 1)
            await loop.halt()
            append_keyed(settings, ["copy"], "retry")  # while no loop runs: the restarted one never read "kept"
            await c.add("w", "s", [("bob", "after the restart")])
            loop.start()
            # one key, one partition: in log order, a copy would come before what was written after it
            await until_true(lambda: "after the restart" in contents(receiver.delivered()))
            assert contents(receiver.delivered()) == ["kept", "after the restart"]
            append_keyed(settings, ["kept-2"], "first-2", key="k2")
            append_keyed(settings, ["copy-2"], "retry-2", key="k2")  # while it runs
            await c.add("w", "s", [("bob", "last")])
            await until_true(lambda: "last" in contents(receiver.delivered()))
            await loop.halt()
    assert contents(receiver.delivered()) == ["kept", "after the restart", "kept-2", "last"]
