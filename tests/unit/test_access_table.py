"""The access table covers every RPC; tokens mint, verify and refuse as documented (no broker, no server)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from datetime import timedelta

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import descriptor_pool

from peerlog.v1 import context_pb2, dialectic_pb2, messages_pb2, sessions_pb2, workspaces_pb2
from services.api import access
from services.api.auth import bearer, refusal
from services.api.server import SERVICE_NAMES
from services.api.settings import AuthSettings
from services.api.tokens import Grant, Verifier, mint, parse_duration, scopes_for
from services.errors import Unauthenticated

SECRET = "s" * 32
AUTH = AuthSettings(secret=SECRET)


def _methods() -> set[str]:
    pool = descriptor_pool.Default()
    return {f"/{name}/{m.name}" for name in SERVICE_NAMES for m in pool.FindServiceByName(name).methods}


def test_every_rpc_of_every_service_has_exactly_one_rule():
    methods = _methods()
    assert len(methods) >= 35
    missing = sorted(m for m in methods if access.rule_for(m) is None)
    assert not missing, f"RPCs without an access rule: {missing}"
    listed = {f"/{access.PACKAGE}.{svc}/{name}" for svc, rules in access.RULES.items() for name in rules}
    assert listed == methods, f"rules for RPCs that do not exist: {sorted(listed - methods)}"


def _grant(*scopes: str) -> Grant:
    return Grant(frozenset(scopes))


def test_a_peer_token_reaches_only_what_that_peer_observes():
    alice = _grant("peer:w/alice")
    chat = "/peerlog.v1.DialecticService/Chat"
    assert (
        refusal(alice, chat, dialectic_pb2.ChatRequest(workspace_id="w", observer_id="alice", target_id="bob")) is None
    )
    why = refusal(alice, chat, dialectic_pb2.ChatRequest(workspace_id="w", observer_id="bob", target_id="alice"))
    assert why == "Chat here needs scope peer:w/bob or workspace:w (or admin)"
    context = "/peerlog.v1.ContextService/GetContext"
    mine = context_pb2.GetContextRequest(workspace_id="w", session_id="s", observer_id="alice", include_summary=False)
    assert refusal(alice, context, mine) is None
    # the summary covers turns alice may not have seen; no observer means no perspective at all
    assert "session:w/s" in refusal(
        alice, context, context_pb2.GetContextRequest(workspace_id="w", session_id="s", observer_id="alice")
    )
    assert "session:w/s" in refusal(
        alice, context, context_pb2.GetContextRequest(workspace_id="w", session_id="s", include_summary=False)
    )


def test_chat_under_a_perspective_needs_both_the_observer_and_the_perspective_peer():
    chat = "/peerlog.v1.DialecticService/Chat"
    asked = dialectic_pb2.ChatRequest(
        workspace_id="w", observer_id="bot", target_id="alice", perspective_peer_id="alice"
    )
    assert refusal(_grant("peer:w/bot"), chat, asked) == "Chat here needs scope peer:w/alice or workspace:w (or admin)"
    assert refusal(_grant("peer:w/bot", "peer:w/alice"), chat, asked) is None
    assert refusal(_grant("workspace:w"), chat, asked) is None
    context = "/peerlog.v1.ContextService/GetContext"
    packed = context_pb2.GetContextRequest(
        workspace_id="w", session_id="s", observer_id="bot", perspective_peer_id="alice", include_summary=False
    )
    assert "peer:w/alice" in refusal(_grant("peer:w/bot"), context, packed)
    assert refusal(_grant("peer:w/bot", "peer:w/alice"), context, packed) is None


def test_message_searches_open_to_a_peer_only_through_its_own_perspective():
    alice = _grant("peer:w/alice")
    search = "/peerlog.v1.WorkspaceService/SearchMessages"
    assert (
        refusal(
            alice,
            search,
            workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="w", query="q", perspective_peer_id="alice"),
        )
        is None
    )
    assert refusal(alice, search, workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="w", query="q"))
    assert refusal(
        alice,
        search,
        workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="w", query="q", perspective_peer_id="bob"),
    )


def test_a_peer_writes_messages_only_as_itself_and_a_session_token_only_into_its_session():
    add = "/peerlog.v1.MessageService/AddMessages"

    def req(session, *authors):
        return messages_pb2.AddMessagesRequest(
            workspace_id="w",
            session_id=session,
            messages=[messages_pb2.NewMessage(peer_id=a, content="hi") for a in authors],
        )

    assert refusal(_grant("peer:w/alice"), add, req("s", "alice", "alice")) is None
    assert refusal(_grant("peer:w/alice"), add, req("s", "alice", "bob"))
    assert refusal(_grant("session:w/s"), add, req("s", "alice", "bob")) is None
    assert (
        refusal(_grant("session:w/s"), add, req("t", "alice"))
        == "AddMessages here needs scope session:w/t or peer:w/alice or workspace:w (or admin)"
    )


def test_workspace_and_admin_scopes_cover_their_range_and_list_what_they_may_see():
    get = "/peerlog.v1.SessionService/GetSession"
    assert refusal(_grant("workspace:w"), get, sessions_pb2.GetSessionRequest(workspace_id="w", session_id="s")) is None
    assert refusal(_grant("workspace:v"), get, sessions_pb2.GetSessionRequest(workspace_id="w", session_id="s"))
    assert refusal(_grant("admin"), get, sessions_pb2.GetSessionRequest(workspace_id="w", session_id="s")) is None
    assert _grant("admin").workspaces() is None
    assert _grant("workspace:a", "workspace:b", "peer:c/p").workspaces() == {"a", "b"}
    # a method the table does not know is never open: admin only
    assert refusal(_grant("workspace:w"), "/peerlog.v1.PeerService/Nope", None)
    assert refusal(_grant("admin"), "/peerlog.v1.PeerService/Nope", None) is None


def test_tokens_round_trip_and_expire():
    verifier = Verifier(AUTH)
    token = mint(AUTH, ["peer:w/alice", "session:w/s"], timedelta(days=30))
    assert verifier.grant(token).scopes == {"peer:w/alice", "session:w/s"}
    assert "exp" not in jwt.decode(mint(AUTH, ["admin"]), SECRET, algorithms=["HS256"])
    expired = mint(AUTH, ["admin"], timedelta(seconds=10), now=time.time() - 3600)
    with pytest.raises(Unauthenticated, match="expired"):
        verifier.grant(expired)
    with pytest.raises(Unauthenticated, match="signature"):
        Verifier(AuthSettings(secret="t" * 32)).grant(token)


def test_a_remembered_token_is_refused_once_it_expires():
    verifier = Verifier(AUTH.model_copy(update={"leeway_s": 0}))  # no clock leeway: expired means expired
    # 3 s: `exp` counts from the whole second minted in, so the token lives 2-3 s, time enough for the
    # two grants on a loaded machine
    token = mint(AUTH, ["workspace:w"], timedelta(seconds=3))
    assert verifier.grant(token).scopes == {"workspace:w"}
    assert verifier.grant(token).scopes == {"workspace:w"}  # the second from memory
    expires = jwt.decode(token, options={"verify_signature": False})["exp"]
    time.sleep(max(0.0, expires - time.time()) + 0.05)
    with pytest.raises(Unauthenticated, match="expired"):
        verifier.grant(token)


def test_a_token_that_failed_to_verify_is_not_remembered_and_the_memory_is_bounded(monkeypatch):
    import services.api.tokens as tokens

    monkeypatch.setattr(tokens, "VERIFIED_TOKENS", 3)
    verifier = Verifier(AUTH)
    forged = mint(AuthSettings(secret="t" * 32), ["admin"])
    for _ in range(2):
        with pytest.raises(Unauthenticated, match="signature"):
            verifier.grant(forged)
    for i in range(5):
        verifier.grant(mint(AUTH, [f"workspace:w{i}"]))
    assert len(verifier._verified) == 3


@pytest.mark.parametrize(
    "claims, phrase",
    [
        ({}, "scope"),
        ({"scope": ""}, "no scope"),
        ({"scope": "workspace:w root"}, "'root'"),
        ({"scope": "peer:w"}, "'peer:w'"),
        ({"scope": "workspace:w/x"}, "'workspace:w/x'"),
    ],
)
def test_tokens_without_a_well_formed_scope_are_refused(claims, phrase):
    with pytest.raises(Unauthenticated, match=phrase):
        Verifier(AUTH).grant(jwt.encode(claims, SECRET, algorithm="HS256"))


def test_an_es256_server_verifies_with_its_public_key_and_refuses_an_hs256_token_keyed_with_it(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = tmp_path / "k.pem", tmp_path / "k.pub.pem"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    auth = AuthSettings(algorithm="ES256", public_key_file=public, private_key_file=private)
    assert Verifier(auth).grant(mint(auth, ["workspace:w"])).scopes == {"workspace:w"}
    # the classic algorithm confusion: the public key used as an HMAC secret (PyJWT itself refuses to sign it)
    signed = b".".join(
        base64.urlsafe_b64encode(part).rstrip(b"=") for part in (b'{"alg":"HS256","typ":"JWT"}', b'{"scope":"admin"}')
    )
    mac = hmac.new(public.read_bytes(), signed, hashlib.sha256).digest()
    forged = (signed + b"." + base64.urlsafe_b64encode(mac).rstrip(b"=")).decode()
    with pytest.raises(Unauthenticated):
        Verifier(auth).grant(forged)


def test_a_server_refuses_to_start_with_a_weak_or_missing_key():
    with pytest.raises(ValueError, match="at least 32 bytes"):
        Verifier(AuthSettings(secret="short"))
    with pytest.raises(ValueError, match="PUBLIC_KEY_FILE"):
        Verifier(AuthSettings(algorithm="RS256"))


def test_the_bearer_header_is_required_and_well_formed():
    assert bearer([("authorization", "Bearer abc")]) == "abc"
    with pytest.raises(Unauthenticated, match="no token"):
        bearer([("x-other", "1")])
    with pytest.raises(Unauthenticated, match="Bearer"):
        bearer([("authorization", "Basic abc")])


def test_key_scopes_and_durations():
    assert scopes_for() == ["admin"]
    assert scopes_for("w") == ["workspace:w"]
    assert scopes_for("w", peer_id="p", session_id="s") == ["peer:w/p", "session:w/s"]
    with pytest.raises(ValueError):
        scopes_for(peer_id="p")
    with pytest.raises(Unauthenticated):
        scopes_for("w", peer_id="a b")
    assert parse_duration("30d") == timedelta(days=30)
    assert parse_duration("90m") == timedelta(minutes=90)
    for bad in ("", "30", "0d", "1y", "-1d"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_the_dev_stack_hands_its_processes_its_key_and_an_admin_token():
    from infra.stack import StackState

    env = StackState(root="/nowhere", api_port=5, auth_secret="k" * 64).env()
    verifier = Verifier(AuthSettings(secret=env["PEERLOG_AUTH_SECRET"]))
    assert verifier.grant(env["PEERLOG_AUTH_TOKEN"]).scopes == {"admin"}


async def test_a_server_stream_sends_nothing_once_its_token_has_lapsed():
    import asyncio
    import secrets
    from types import SimpleNamespace

    import grpc

    from peerlog.v1 import events_pb2
    from services.api.auth import EXPIRED_MID_STREAM, AuthInterceptor

    auth = AuthSettings(secret=secrets.token_hex(32), leeway_s=0)
    token = mint(auth, ["workspace:acme"], expires_in=timedelta(seconds=2))

    async def events(request, context):
        yield "before"
        await asyncio.sleep(3.2)  # the token lapses meanwhile
        yield "after"

    class Aborted(Exception):
        pass

    class Context:
        async def abort(self, code, details):
            self.code, self.details = code, details
            raise Aborted

    async def continuation(details):
        return grpc.unary_stream_rpc_method_handler(events)

    call = SimpleNamespace(
        method="/peerlog.v1.EventService/Subscribe", invocation_metadata=(("authorization", f"Bearer {token}"),)
    )
    handler = await AuthInterceptor(Verifier(auth)).intercept_service(continuation, call)
    context, sent = Context(), []
    with pytest.raises(Aborted):
        async for item in handler.unary_stream(events_pb2.SubscribeRequest(workspace_id="acme"), context):
            sent.append(item)
    assert sent == ["before"]
    assert (context.code, context.details) == (grpc.StatusCode.UNAUTHENTICATED, EXPIRED_MID_STREAM)
