"""peerlog_client's transport against an in-process gRPC server: channels, close(), retries of reads."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

import peerlog_client._sync as sync_client
from peerlog_client import AsyncPeerlog, Peerlog, RetryPolicy
from peerlog_client import models as m
from peerlog_client._async import AsyncSession
from peerlog_client._gen.peerlog.v1 import messages_pb2, messages_pb2_grpc, webhooks_pb2, webhooks_pb2_grpc
from peerlog_client._gen.peerlog.v1.messages_pb2_grpc import MessageServiceStub
from peerlog_client._sync import Session, Workspace
from peerlog_client.errors import ClientClosed, Unavailable

HELD_S = 10.0  # how long the server holds a write the test cuts off (it is released long before)
ARRIVAL_S = 60.0  # how long a write may take to reach the server on a loaded machine


class Messages(messages_pb2_grpc.MessageServiceServicer):
    """Answers AddMessages; with `hold` set, keeps each call until `release` (so a test can close mid-call)."""

    def __init__(self) -> None:
        self.hold = False
        self.arrived, self.release = threading.Event(), threading.Event()
        self.keys: list[str] = []

    def AddMessages(self, request, context):
        self.keys.append(request.idempotency_key)
        self.arrived.set()
        if self.hold:
            self.release.wait(HELD_S)
        return messages_pb2.AddMessagesResponse(message_ids=["m1"], consistency_token="peerlog.sessions:0:1")


class Webhooks(webhooks_pb2_grpc.WebhookServiceServicer):
    """Fails the first call of each method UNAVAILABLE, then answers; counts the calls."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def _first_fails(self, method: str, context) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1
        if self.calls[method] == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "a blip")

    def ListWebhooks(self, request, context):
        self._first_fails("ListWebhooks", context)
        return webhooks_pb2.ListWebhooksResponse()

    def ListWebhookDeadLetters(self, request, context):
        self._first_fails("ListWebhookDeadLetters", context)
        return webhooks_pb2.ListWebhookDeadLettersResponse()

    def DeleteWebhook(self, request, context):
        self._first_fails("DeleteWebhook", context)
        return webhooks_pb2.DeleteWebhookResponse()


@pytest.fixture
def server() -> Iterator[tuple[str, Messages, Webhooks]]:
    messages, webhooks = Messages(), Webhooks()
    grpc_server = grpc.server(futures.ThreadPoolExecutor(16))
    messages_pb2_grpc.add_MessageServiceServicer_to_server(messages, grpc_server)
    webhooks_pb2_grpc.add_WebhookServiceServicer_to_server(webhooks, grpc_server)
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    yield f"127.0.0.1:{port}", messages, webhooks
    messages.release.set()
    grpc_server.stop(0)


def _session_info() -> m.Session:
    return m.Session("w", "s", {}, None, (), 0)


def test_threads_racing_a_new_sync_client_share_one_channel_and_close_closes_it(server, monkeypatch):
    target, _, _ = server
    made, real = [], grpc.insecure_channel

    def slow_channel(*args, **kwargs):
        time.sleep(0.05)  # widens the window in which a second thread could make a second channel
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(sync_client.grpc, "insecure_channel", slow_channel)
    client = Peerlog(target)
    session = Session(client._t, _session_info(), False)
    start = threading.Barrier(8)

    def first_call() -> None:
        start.wait()
        session.add_messages([("alice", "hi")])

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client.close()

    assert len(made) == 1, f"{len(made)} channels made; close() closed one"
    # the stub made before close() (a new stub on a closed channel could crash the interpreter)
    with pytest.raises(ValueError, match="closed channel"):
        client._t._stubs[MessageServiceStub].AddMessages(messages_pb2.AddMessagesRequest(), timeout=2)
    with pytest.raises(ClientClosed):
        session.add_messages([("alice", "again")])


async def _add_while(client: AsyncPeerlog, messages: Messages, meanwhile) -> asyncio.Task:
    """Start a write the server holds, do `meanwhile()` once it has arrived, and return the write's task."""
    messages.hold = True
    session = AsyncSession(client._t, _session_info(), False)
    write = asyncio.create_task(session.add_messages([("alice", "hi")]))
    assert await asyncio.to_thread(messages.arrived.wait, ARRIVAL_S), "the write never reached the server"
    await meanwhile(write)
    return write


async def test_closing_the_async_client_mid_write_raises_ClientClosed_with_its_key(server):
    target, messages, _ = server
    client = AsyncPeerlog(target)

    async def close(write: asyncio.Task) -> None:
        await client.close()

    write = await _add_while(client, messages, close)
    with pytest.raises(ClientClosed) as closed:
        await write
    assert closed.value.idempotency_key == messages.keys[0] and closed.value.attempts == 1


async def test_a_task_cancelled_as_its_client_closes_is_still_cancelled(server):
    target, messages, _ = server
    client = AsyncPeerlog(target)

    async def cancel_and_close(write: asyncio.Task) -> None:
        write.cancel()
        await client.close()

    write = await _add_while(client, messages, cancel_and_close)
    with pytest.raises(asyncio.CancelledError):
        await write
    assert write.cancelled()


def test_webhook_reads_are_retried_on_unavailable_like_other_reads(server):
    target, _, webhooks = server
    with Peerlog(target, retry=RetryPolicy(initial_backoff=0.01)) as client:
        workspace = Workspace(client._t, m.Workspace("w", {}, None), False)
        assert workspace.webhooks() == ()
        assert workspace.webhook_dead_letters("h") == ()
        with pytest.raises(Unavailable):  # a write without an idempotency key may have landed: not repeated
            workspace.delete_webhook("h")
    assert webhooks.calls == {"ListWebhooks": 2, "ListWebhookDeadLetters": 2, "DeleteWebhook": 1}
