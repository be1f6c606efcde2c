"""Metadata holding integral numbers past 64 bits (1e20, -1e19) is listed and cloned like any other.

Postgres keeps such a number exactly and psycopg reads it back as a Python int, which orjson refuses to
write: every list page holding the row failed INTERNAL, and so did cloning a session with such a message."""

from __future__ import annotations

from google.protobuf import json_format, struct_pb2

from peerlog.v1 import common_pb2, messages_pb2, peers_pb2, sessions_pb2, workspaces_pb2
from services.cli.client import Client

BIG = {"n": 1e20, "low": -1e19, "nested": [{"n": 1e20}]}


def big() -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(BIG)
    return s


def read_back(metadata: struct_pb2.Struct) -> dict:
    return json_format.MessageToDict(metadata)


async def test_metadata_with_integral_numbers_past_64_bits_lists_and_clones(channel):
    c = Client(channel)
    await c.workspaces.GetOrCreateWorkspace(
        workspaces_pb2.GetOrCreateWorkspaceRequest(workspace_id="w", metadata=big())
    )
    await c.peer("w", "alice", metadata=big())
    await c.session("w", "s", members=["alice"], metadata=big())
    made = await c.add("w", "s", [messages_pb2.NewMessage(peer_id="alice", content="hi", metadata=big())])
    after = common_pb2.ReadConsistency(consistency_token=made.consistency_token)

    workspaces = await c.workspaces.ListWorkspaces(workspaces_pb2.ListWorkspacesRequest(consistency=after))
    assert [read_back(w.metadata) for w in workspaces.workspaces] == [BIG]
    peers = await c.peers.ListPeers(peers_pb2.ListPeersRequest(workspace_id="w", consistency=after))
    assert [read_back(p.metadata) for p in peers.peers] == [BIG]
    sessions = await c.sessions.ListSessions(sessions_pb2.ListSessionsRequest(workspace_id="w", consistency=after))
    assert [read_back(s.metadata) for s in sessions.sessions] == [BIG]

    cloned = await c.sessions.CloneSession(
        sessions_pb2.CloneSessionRequest(workspace_id="w", session_id="s", new_session_id="copy", consistency=after)
    )
    assert read_back(cloned.session.metadata) == BIG
    copies = await c.list_messages("w", "copy", cloned.consistency_token)
    assert [read_back(m.metadata) for m in copies.messages] == [BIG]
