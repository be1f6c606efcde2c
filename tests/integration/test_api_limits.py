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
    server = await start(settings.model_copy(update={"api": settings.api.model_copy(update=limits)}))
    try:
        async with admin_channel(settings, server.port) as chan:
            await Client(chan).workspace("w")
            events = events_pb2_grpc.EventServiceStub(chan)
            held = [events.Subscribe(events_pb2.SubscribeRequest(workspace_id="w")) for _ in range(2)]
            async with asyncio.timeout(30):
                for stream in held:
                    await stream.read()  # open: it holds its place
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


async def _once_room(stub, timeout_s: float = 10.0):
    """GetWorkspace of 'w', sent again while the server has not yet let a cancelled call's place go."""
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                return await stub.GetWorkspace(workspaces_pb2.GetWorkspaceRequest(workspace_id="w"))
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
            await asyncio.sleep(0.05)


async def test_a_connections_calls_past_its_stream_limit_wait_for_one_to_end(settings, projector):
    # the limit per connection keeps one connection from taking all of max_concurrent_rpcs; the client's
    # HTTP/2 transport holds a further call back rather than failing it
    limits = {"max_streams_per_connection": 1}
    server = await start(settings.model_copy(update={"api": settings.api.model_copy(update=limits)}))
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
