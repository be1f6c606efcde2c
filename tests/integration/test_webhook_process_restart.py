"""`peerlog webhooks` as a process against the real stack: a webhook registered over gRPC gets its
events; the process SIGKILLed and started again delivers what was written meanwhile, and nothing twice."""

from __future__ import annotations

import asyncio
import json

import pytest

from peerlog.v1 import webhooks_pb2 as wh
from peerlog.v1 import webhooks_pb2_grpc
from services.cli.client import Client
from services.webhooks.store import WebhookStore, engine_for
from tests.support.processes import Worker
from tests.support.wait import until_true
from tests.support.webhook_receiver import Receiver, private_targets_allowed


@pytest.fixture
def settings(settings):  # noqa: F811 - the conftest fixture, with private webhook targets allowed
    """The receiver listens on 127.0.0.1, which webhooks may reach only with the setting on."""
    return private_targets_allowed(settings)


async def test_the_webhook_process_killed_and_restarted_neither_loses_nor_repeats_a_delivery(
    channel, settings, tmp_path
):
    c, stub = Client(channel), webhooks_pb2_grpc.WebhookServiceStub(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    await c.add("w", "s", [("alice", "one")])
    with Receiver() as receiver:
        made = await stub.CreateWebhook(
            wh.CreateWebhookRequest(workspace_id="w", url=receiver.url, event_types=["MessageAppended"])
        )
        store = WebhookStore(engine_for(settings.database))
        process = Worker(settings, tmp_path / "webhooks.log", command="webhooks").start()
        try:
            await until_true(lambda: len(receiver.delivered()) == 1, timeout=60)
            # its progress is written right after the 2xx: killed before that, a repeat is what it promises
            await until_true(lambda: store.cursor(made.webhook.webhook_id), timeout=60)
            process.kill()
            await c.add("w", "s", [("bob", "two")])
            process = Worker(settings, tmp_path / "webhooks.log", command="webhooks").start()
            await until_true(lambda: len(receiver.delivered()) == 2, timeout=60)
            await asyncio.sleep(2)  # a repeat would arrive by now
        finally:
            process.stop()
            store.engine.dispose()
    assert [json.loads(b)["content"] for b in receiver.delivered()] == ["one", "two"], process.log_text()[-2000:]
