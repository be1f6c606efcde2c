"""Bounded staleness: a message write is acknowledged once the projector is close behind it, or after the
configured wait when it is not (services/api/backpressure.py)."""

from __future__ import annotations

import time

import pytest

from services.cli.client import Client
from tests.support.auth import admin_channel

WAIT_S = 6.0


@pytest.fixture
async def client(settings, projector):
    from services.api.server import start

    api = settings.api.model_copy(update={"write_backlog_records": 5, "write_backlog_wait_s": WAIT_S})
    server = await start(settings.model_copy(update={"api": api}))
    async with admin_channel(settings, server.port) as chan:
        yield Client(chan)
    await server.stop(0)


async def timed_add(c: Client, count: int, first: int = 0):
    started = time.monotonic()
    written = await c.add("w", "s", [("alice", f"turn {first + i}") for i in range(count)])
    return written, time.monotonic() - started


async def test_a_message_write_far_ahead_of_a_stopped_projector_is_acknowledged_after_the_wait_and_kept(
    client, projector
):
    await client.setup_conversation("w", "s", peers=("alice",))
    projector.stop()
    written, took = await timed_add(client, 20)
    assert took >= WAIT_S - 0.1, "it waited for the projector, which was 20 records behind"
    assert len(written.message_ids) == 20
    projector.start()
    listed = await client.list_messages("w", "s", token=written.consistency_token)
    assert [m.message_id for m in listed.messages] == list(written.message_ids), "the write was kept"


async def test_a_message_write_is_acknowledged_as_soon_as_a_running_projector_is_close_behind(client, projector):
    await client.setup_conversation("w", "s", peers=("alice",))
    for batch in range(3):
        written, took = await timed_add(client, 20, first=20 * batch)
        assert took < WAIT_S, "a running projector caught up before the wait ran out"
    listed = await client.list_messages("w", "s", token=written.consistency_token, page_size=100)
    assert len(listed.messages) == 60


async def test_a_small_write_is_acknowledged_at_once_even_with_the_projector_stopped(client, projector):
    await client.setup_conversation("w", "s", peers=("alice",))
    projector.stop()
    _, took = await timed_add(client, 3)
    assert took < WAIT_S / 2, "three records are within the allowed backlog of five"
