"""Tokens and timestamps no honest client sends are refused at once as INVALID_ARGUMENT; undecodable
request bodies too. Honest ones keep working."""

from __future__ import annotations

import base64
import time

import grpc
import pytest
from google.protobuf import struct_pb2, timestamp_pb2

from peerlog.v1 import (
    common_pb2,
    context_pb2,
    context_pb2_grpc,
    messages_pb2,
    peers_pb2,
    sessions_pb2,
    workspaces_pb2,
)
from services.cli.client import Client
from tests.integration.test_bad_input import rejected


@pytest.fixture
async def convo(channel):
    c = Client(channel)
    await c.setup_conversation("acme", "s1", peers=("alice", "bob"))
    return c


def _unsigned(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


async def test_consistency_tokens_no_write_can_have_made_are_refused_at_once(convo, settings):
    written = await convo.add("acme", "s1", [("alice", "hello")])
    sessions = f"{settings.kafka.topic_prefix}sessions"
    impossible = [
        "peerlog.unknown:0:1",  # not one of this server's topics
        f"{sessions}:99:0",  # the topic has 3 partitions
        f"{sessions}:0:{10**12}",  # far beyond the log's end
        f"{sessions}:0:²",
        f"{sessions}:0:{'9' * 5000}",
        f"{sessions}\x00:0:1",
        ",".join([f"{sessions}:0:0"] * 50_000),
    ]
    for token in impossible:
        started = time.monotonic()
        await rejected(
            convo.list_messages("acme", "s1", token=token), grpc.StatusCode.INVALID_ARGUMENT, "consistency token"
        )
        assert time.monotonic() - started < 3, f"held for the wait: {token[:60]!r}"  # the wait is 15 s
    # a real token, also merged with an earlier one, still waits and reads
    got = await convo.list_messages("acme", "s1", token=written.consistency_token)
    assert [m.content for m in got.messages] == ["hello"]


async def test_timestamps_out_of_range_are_invalid_argument_in_every_field(convo, channel):
    too_late = timestamp_pb2.Timestamp(seconds=253_402_300_800)
    bad_nanos = timestamp_pb2.Timestamp(seconds=0, nanos=1_000_000_000)
    before_year_1 = timestamp_pb2.Timestamp(seconds=-62_135_596_801)
    negative_nanos = timestamp_pb2.Timestamp(seconds=0, nanos=-1)
    await rejected(
        convo.add("acme", "s1", [messages_pb2.NewMessage(peer_id="alice", content="hi", created_at=before_year_1)]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "created_at",
    )
    await rejected(
        convo.workspaces.SearchMessages(
            workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="acme", query="hi", after=too_late)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "after",
    )
    await rejected(
        convo.workspaces.SearchMessages(
            workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="acme", query="hi", before=negative_nanos)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "before",
    )
    await rejected(
        convo.peers.GetPeerCard(
            peers_pb2.GetPeerCardRequest(workspace_id="acme", observer_id="alice", observed_id="alice", as_of=bad_nanos)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "as_of",
    )
    representation = context_pb2.GetRepresentationRequest(workspace_id="acme", observer_id="alice", as_of=too_late)
    await rejected(
        context_pb2_grpc.ContextServiceStub(channel).GetRepresentation(representation),
        grpc.StatusCode.INVALID_ARGUMENT,
        "as_of",
    )


async def test_a_page_token_works_only_for_the_list_that_issued_it(convo):
    await convo.peer("acme", "carol")
    page = common_pb2.PageRequest(page_size=1)
    peers = await convo.peers.ListPeers(peers_pb2.ListPeersRequest(workspace_id="acme", page=page))
    assert peers.next_page_token
    more = await convo.peers.ListPeers(
        peers_pb2.ListPeersRequest(
            workspace_id="acme", page=common_pb2.PageRequest(page_size=1, page_token=peers.next_page_token)
        )
    )
    assert more.peers[0].peer_id > peers.peers[0].peer_id
    added = await convo.add("acme", "s1", [("alice", "one"), ("bob", "two")])
    messages = await convo.list_messages("acme", "s1", token=added.consistency_token, page_size=1)
    assert messages.next_page_token

    async def list_workspaces(token: str):
        return await convo.workspaces.ListWorkspaces(
            workspaces_pb2.ListWorkspacesRequest(page=common_pb2.PageRequest(page_token=token))
        )

    async def list_sessions(token: str):
        return await convo.sessions.ListSessions(
            sessions_pb2.ListSessionsRequest(workspace_id="acme", page=common_pb2.PageRequest(page_token=token))
        )

    tampered = messages.next_page_token[:-2] + ("AA" if not messages.next_page_token.endswith("AA") else "BB")
    for call in (
        list_workspaces(messages.next_page_token),
        list_workspaces(peers.next_page_token),
        list_sessions(peers.next_page_token),
        convo.list_messages("acme", "s1", page_token=tampered),
        convo.list_messages("acme", "s1", page_token=messages.next_page_token, reverse=True),
    ):
        await rejected(call, grpc.StatusCode.INVALID_ARGUMENT, "page_token")


@pytest.mark.parametrize("position", ["²", "9" * 20, "9" * 5000, "acme\x00", "1\x00"])
async def test_page_tokens_that_decode_to_what_no_list_issues_are_invalid_argument(convo, position):
    # before tokens were signed, these reached int() or Postgres and came back INTERNAL
    await rejected(
        convo.list_messages("acme", "s1", page_token=_unsigned(position)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_token",
    )
    await rejected(
        convo.workspaces.ListWorkspaces(
            workspaces_pb2.ListWorkspacesRequest(page=common_pb2.PageRequest(page_token=_unsigned(position)))
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_token",
    )


def _nested_struct(depth: int) -> struct_pb2.Struct:
    top = struct_pb2.Struct()
    inner = top
    for _ in range(depth):
        inner = inner.fields["a"].struct_value
    return top


def _deep_metadata(depth: int) -> bytes:
    """A GetOrCreateWorkspaceRequest whose metadata (field 2) nests `depth` Structs, encoded by hand: the
    Python protobuf itself refuses to build one that deep."""
    metadata = _nested_struct(depth).SerializeToString()
    return b"\x0a\x01w" + b"\x12" + _varint(len(metadata)) + metadata


def _varint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


async def test_request_bodies_that_do_not_decode_are_invalid_argument(channel):
    def raw(method: str, stream: bool = False):
        kind = channel.unary_stream if stream else channel.unary_unary
        return kind(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)

    get_workspace = raw("/peerlog.v1.WorkspaceService/GetWorkspace")
    create = raw("/peerlog.v1.WorkspaceService/GetOrCreateWorkspace")
    bad_utf8 = b"\x0a\x02\xff\xfe"  # field 1 (workspace_id), two bytes that are not UTF-8
    lone_surrogate = b"\x0a\x03\xed\xa0\x80"  # U+D800 encoded as if it were a character
    for call in (get_workspace(bad_utf8), get_workspace(lone_surrogate), create(_deep_metadata(40))):
        await rejected(call, grpc.StatusCode.INVALID_ARGUMENT, "not a valid message")
    stream = raw("/peerlog.v1.DialecticService/ChatStream", stream=True)(bad_utf8)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        async for _ in stream:
            pass
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
