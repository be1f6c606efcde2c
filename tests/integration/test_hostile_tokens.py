"""Tokens and timestamps no honest client sends are refused at once as INVALID_ARGUMENT; undecodable
request bodies too. Honest ones keep working."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import grpc
import pytest
from cryptography.hazmat.primitives import serialization as ser
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from google.protobuf import struct_pb2, timestamp_pb2

from peerlog.v1 import (
    common_pb2,
    context_pb2,
    context_pb2_grpc,
    messages_pb2,
    peers_pb2,
    sessions_pb2,
    workspaces_pb2,
    workspaces_pb2_grpc,
)
from services.api.channels import aio_channel
from services.api.settings import AuthSettings
from services.api.tokens import mint
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
    # without the log's end: the partition is every workspace's, and its end says how much the others write
    await rejected(
        convo.list_messages("acme", "s1", token=f"{sessions}:0:{10**12}"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "beyond the log's end; pass back the token a write returned",
    )
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


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _signed(settings, payload: dict) -> str:
    """An HS256 token with any payload, signed with the server's key (mint only makes honest ones)."""
    head, body = _b64(b'{"alg":"HS256","typ":"JWT"}'), _b64(json.dumps(payload).encode())
    key = settings.auth.secret.get_secret_value().encode()
    return f"{head}.{body}.{_b64(hmac.new(key, f'{head}.{body}'.encode(), hashlib.sha256).digest())}"


async def _get_workspace(address: str, token: str):
    async with aio_channel(address, token) as chan:
        return await workspaces_pb2_grpc.WorkspaceServiceStub(chan).GetWorkspace(
            workspaces_pb2.GetWorkspaceRequest(workspace_id="acme")
        )


@pytest.mark.parametrize("exp", [10**400, 10**20])
async def test_a_signed_token_whose_exp_is_no_time_is_unauthenticated_not_unknown(convo, channel, settings, exp):
    # 10**400 overflowed float() after the signature verified: UNKNOWN with the library's message
    await rejected(
        _get_workspace(channel.address, _signed(settings, {"scope": "admin", "exp": exp})),
        grpc.StatusCode.UNAUTHENTICATED,
        "exp",
    )


async def test_a_token_made_on_a_clock_a_few_seconds_ahead_is_served(convo, channel, settings):
    # the minting machine's clock 2 s ahead was refused as "not yet valid (iat)"
    for ahead in (2, 30):
        got = await _get_workspace(channel.address, mint(settings.auth, ["workspace:acme"], now=time.time() + ahead))
        assert got.workspace_id == "acme"
    await rejected(
        _get_workspace(channel.address, mint(settings.auth, ["workspace:acme"], now=time.time() + 600)),
        grpc.StatusCode.UNAUTHENTICATED,
        "clock skew",
    )


def _public_key_file(tmp_path, kind: str):
    pub = tmp_path / "pub.pem"
    if kind == "garbage":
        pub.write_text("-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n")
    elif kind == "empty":
        pub.write_text("")
    else:
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
        pub.write_bytes(other.public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo))
    return pub


@pytest.mark.parametrize("kind", ["garbage", "empty", "rsa-key-for-es256"])
async def test_a_public_key_file_that_cannot_verify_refuses_the_start(settings, tmp_path, kind):
    # it used to start a server on which every call with a token failed UNKNOWN
    from services.api.server import start

    auth = AuthSettings(algorithm="ES256", public_key_file=_public_key_file(tmp_path, kind))
    with pytest.raises(ValueError, match="PEERLOG_AUTH_PUBLIC_KEY_FILE .* must be an EC P-256 public key"):
        await start(settings.model_copy(update={"auth": auth}))


async def test_a_good_es256_key_pair_serves_its_tokens(settings, projector, tmp_path):
    from services.api.server import start

    private = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "priv.pem").write_bytes(
        private.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption())
    )
    (tmp_path / "pub.pem").write_bytes(
        private.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo)
    )
    token = mint(AuthSettings(algorithm="ES256", private_key_file=tmp_path / "priv.pem"), ["admin"])
    server = await start(
        settings.model_copy(update={"auth": AuthSettings(algorithm="ES256", public_key_file=tmp_path / "pub.pem")})
    )
    try:
        async with aio_channel(f"127.0.0.1:{server.port}", token) as chan:
            listed = await workspaces_pb2_grpc.WorkspaceServiceStub(chan).ListWorkspaces(
                workspaces_pb2.ListWorkspacesRequest()
            )
        assert listed is not None
    finally:
        await server.stop(0)
