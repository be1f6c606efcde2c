"""The server's own limits on what callers may hold open at once, refused before a call's token is checked."""

from __future__ import annotations

import asyncio

import grpc

from peerlog.v1 import events_pb2, events_pb2_grpc, workspaces_pb2, workspaces_pb2_grpc
from services.api.server import start
from services.cli.client import Client
from tests.support.auth import admin_channel
from tests.support.rpc import rejected


async def test_rpcs_past_the_servers_concurrency_limit_are_resource_exhausted(settings, projector):
    # before: no limit, so a caller (even one without a token: its requests are received and decoded before
    # the token is checked) opened streams without end, each sending 50 MB
    limits = {"max_concurrent_rpcs": 2}
    server = await limited(settings, limits)
    try:
        async with admin_channel(settings, server.port) as chan:
            await Client(chan).workspace("w")
            events = events_pb2_grpc.EventServiceStub(chan)
            held = [await _opened(events) for _ in range(2)]  # open: each holds its place
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as anonymous:
                await rejected(
                    workspaces_pb2_grpc.WorkspaceServiceStub(anonymous).GetWorkspace(
                        workspaces_pb2.GetWorkspaceRequest(workspace_id="w")
                    ),
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                )
            held[0].cancel()
            got = await _once_room(workspaces_pb2_grpc.WorkspaceServiceStub(chan))
            assert got.workspace_id == "w"
            held[1].cancel()
    finally:
        await server.stop(0)


async def limited(settings, limits: dict):
    """An API server whose settings are the test's with `limits` (ApiSettings fields) changed."""
    return await start(settings.model_copy(update={"api": settings.api.model_copy(update=limits)}))


async def silent(until: asyncio.Event):
    """A client stream's requests: none, until `until` is set."""
    await until.wait()
    return
    yield  # an async generator that sends nothing


async def _while_full(call, timeout_s: float = 30.0):
    """`call()` made again while it is RESOURCE_EXHAUSTED: gRPC frees a finished or cancelled call's place
    only after its own clean-up."""
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                return await call()
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
            await asyncio.sleep(0.05)


async def _opened(events):
    """A Subscribe stream of 'w' that has answered: it holds its place."""

    async def open_one():
        stream = events.Subscribe(events_pb2.SubscribeRequest(workspace_id="w"))
        await stream.read()
        return stream

    return await _while_full(open_one)


async def _once_room(stub):
    """GetWorkspace of 'w', once the server has room for it."""
    return await _while_full(lambda: stub.GetWorkspace(workspaces_pb2.GetWorkspaceRequest(workspace_id="w")))


async def test_a_connections_calls_past_its_stream_limit_wait_for_one_to_end(settings, projector):
    # the limit per connection keeps one connection from taking all of max_concurrent_rpcs; the client's
    # HTTP/2 transport holds a further call back rather than failing it
    limits = {"max_streams_per_connection": 1}
    server = await limited(settings, limits)
    try:
        async with admin_channel(settings, server.port) as chan:
            await Client(chan).workspace("w")
            held = events_pb2_grpc.EventServiceStub(chan).Subscribe(events_pb2.SubscribeRequest(workspace_id="w"))
            async with asyncio.timeout(30):
                await held.read()
            waiting = asyncio.ensure_future(
                workspaces_pb2_grpc.WorkspaceServiceStub(chan).GetWorkspace(
                    workspaces_pb2.GetWorkspaceRequest(workspace_id="w")
                )
            )
            await asyncio.sleep(1.0)
            assert not waiting.done()  # held back while the stream is open
            held.cancel()
            async with asyncio.timeout(10):
                assert (await waiting).workspace_id == "w"
    finally:
        await server.stop(0)


async def test_client_streams_without_a_token_are_refused_at_once_and_hold_no_call_slot(settings, projector):
    # the token was checked only once the stream's first request came: streams that sent nothing kept their
    # slot of max_concurrent_rpcs for as long as the connection lived, and the server refused every tenant
    from peerlog.v1 import messages_pb2_grpc

    never = asyncio.Event()
    limits = {"max_concurrent_rpcs": 2}
    server = await limited(settings, limits)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as anonymous:
            uploads = messages_pb2_grpc.MessageServiceStub(anonymous)
            async with asyncio.timeout(30):
                for _ in range(3):
                    await rejected(uploads.UploadFile(silent(never)), grpc.StatusCode.UNAUTHENTICATED, "no token")
        async with admin_channel(settings, server.port) as chan:
            assert (await Client(chan).workspace("w")).workspace.workspace_id == "w"
    finally:
        never.set()
        await server.stop(0)


async def test_a_client_stream_whose_first_request_never_comes_ends_and_frees_its_slot(
    settings, projector, monkeypatch
):
    from peerlog.v1 import messages_pb2_grpc
    from services.api import auth

    monkeypatch.setattr(auth, "FIRST_REQUEST_S", 0.5)
    never = asyncio.Event()
    limits = {"max_concurrent_rpcs": 1}
    server = await limited(settings, limits)
    try:
        async with admin_channel(settings, server.port) as chan:
            await Client(chan).workspace("w")
            async with asyncio.timeout(30):
                await rejected(
                    messages_pb2_grpc.MessageServiceStub(chan).UploadFile(silent(never)),
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    "no request came within 0.5 s",
                )
            assert (await _once_room(workspaces_pb2_grpc.WorkspaceServiceStub(chan))).workspace_id == "w"
    finally:
        never.set()
        await server.stop(0)
