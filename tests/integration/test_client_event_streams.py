"""Workspace.events in both clients against the real stack: typed events in order, resumed from the last
event's cursor without missing what was written in between."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

import pytest

from peerlog_client import AsyncPeerlog, LogEvent, Peerlog
from tests.integration.test_client_library import ApiInThread
from tests.support.auth import admin_token


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
