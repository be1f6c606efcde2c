"""Workspace.events in both clients against the real stack: typed events in order, resumed from the last
event's cursor without missing what was written in between."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

import pytest

from peerlog_client import AsyncPeerlog, LogEvent, NotFound, Peerlog
from tests.integration.test_client_library import ApiInThread
from tests.support.auth import admin_token
from tests.support.webhook_receiver import private_targets_allowed


@pytest.fixture
def settings(settings):  # noqa: F811 - the conftest fixture, with private webhook targets allowed
    """One webhook names 127.0.0.1, which webhooks may reach only with the setting on."""
    return private_targets_allowed(settings)


@pytest.fixture
def api(settings, projector) -> Iterator[ApiInThread]:
    running = ApiInThread(settings).start()
    yield running
    running.close()


def test_the_sync_client_streams_typed_events_and_resumes_from_a_cursor(api, settings):
    with Peerlog(api.address, token=admin_token(settings), timeout=20) as peerlog:
        ws = peerlog.workspace("w")
        alice, bob = ws.peer("alice"), ws.peer("bob")
        chat = ws.session("s", members=[alice, bob])
        chat.add_messages([alice.message("one"), bob.message("two")])
        first = list(islice(ws.events(types=["MessageAppended"]), 1))
        assert isinstance(first[0], LogEvent) and first[0].data["content"] == "one"
        assert first[0].key == "w/s" and first[0].position.topic.endswith("sessions")
        chat.add_messages([alice.message("three")])
        rest = list(islice(ws.events(types=["MessageAppended"], cursor=first[0].cursor), 2))
        assert [e.data["content"] for e in rest] == ["two", "three"]


async def test_the_async_client_streams_the_same_events(api, settings):
    async with AsyncPeerlog(api.address, token=admin_token(settings), timeout=20) as peerlog:
        ws = await peerlog.workspace("w")
        alice = await ws.peer("alice")
        chat = await ws.session("s", members=[alice])
        await chat.add_messages([alice.message("hello")])
        got = []
        async for event in ws.events(types=["MessageAppended", "SessionCreated"]):
            got.append(event)
            if event.type == "MessageAppended":
                break
        assert [e.type for e in got] == ["SessionCreated", "MessageAppended"] and got[-1].data["content"] == "hello"


def test_the_sync_client_registers_lists_and_deletes_webhooks(api, settings):
    with Peerlog(api.address, token=admin_token(settings), timeout=20) as peerlog:
        ws = peerlog.workspace("w")
        made = ws.create_webhook("http://127.0.0.1:9/hook", types=["MessageAppended"])
        assert made.secret.startswith("whsec_") and made.webhook.event_types == ("MessageAppended",)
        assert ws.webhooks() == (made.webhook,) and ws.webhook_dead_letters(made.webhook.webhook_id) == ()
        with pytest.raises(NotFound):
            ws.retry_webhook_dead_letter(made.webhook.webhook_id, "no-such-event")
        ws.delete_webhook(made.webhook.webhook_id)
        assert ws.webhooks() == ()


async def test_the_async_client_registers_and_lists_webhooks(api, settings):
    async with AsyncPeerlog(api.address, token=admin_token(settings), timeout=20) as peerlog:
        ws = await peerlog.workspace("w")
        made = await ws.create_webhook("https://example.invalid/hook")
        assert await ws.webhooks() == (made.webhook,) and made.webhook.created_at is not None
