"""Reads of messages take their metadata (up to 64 KB of JSON each) only where the reply returns it."""

from __future__ import annotations

from google.protobuf import struct_pb2

from peerlog.v1 import context_pb2, context_pb2_grpc, messages_pb2, workspaces_pb2
from services.cli.client import Client
from tests.support.sql_rows import rows_read


async def test_get_context_searches_messages_without_reading_their_metadata_which_search_messages_returns(channel):
    # GetContext's relevant messages (and Chat's message tools) read every hit's metadata, up to 100 of
    # 64 KB each, and returned none of it
    c = Client(channel)
    await c.setup_conversation("w", "s")
    metadata = struct_pb2.Struct()
    metadata.update({"note": "x" * 60_000})
    turns = [
        messages_pb2.NewMessage(peer_id="bob", content=f"lighthouse visit {i}", metadata=metadata) for i in range(20)
    ]
    token = (await c.add("w", "s", turns)).consistency_token

    with rows_read({"content", "metadata"}) as read:
        context = await context_pb2_grpc.ContextServiceStub(channel).GetContext(
            context_pb2.GetContextRequest(
                workspace_id="w",
                session_id="s",
                token_budget=3000,
                observer_id="alice",
                search_query="lighthouse",
                consistency={"consistency_token": token},
            )
        )
    assert context.relevant_messages and sum(read) == 0

    found = await c.workspaces.SearchMessages(
        workspaces_pb2.SearchWorkspaceMessagesRequest(
            workspace_id="w", query="lighthouse", limit=5, consistency={"consistency_token": token}
        )
    )
    assert len(found.results) == 5 and all(r.message.metadata == metadata for r in found.results)
