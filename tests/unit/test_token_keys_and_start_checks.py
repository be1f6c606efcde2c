"""What the trust boundary refuses, and how: an unusable key or certificate, a port no socket has, a database
URL without the psycopg driver at start, in one line naming the setting; a token no check foresaw as
UNAUTHENTICATED, never UNKNOWN; clocks a little apart tolerated; lifetimes and expiries no clock holds refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import stat
import time
from pathlib import Path
from types import SimpleNamespace

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives import serialization as ser
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from typer.testing import CliRunner

from projections.settings import ProjectorSettings
from services.api.auth import AuthInterceptor
from services.api.processes import check
from services.api.server import tls_credentials
from services.api.settings import ApiSettings, AuthSettings
from services.api.tokens import Verifier, mint, parse_duration
from services.cli.main import app
from services.errors import Unauthenticated
from services.settings import Settings
from services.worker.settings import WorkerSettings

SECRET = "k" * 64


def _pem_public(key) -> bytes:
    return key.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo)


def _pem_private(key) -> bytes:
    return key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption())


@pytest.fixture(scope="module")
def keys() -> dict[str, object]:
    return {"ec": ec.generate_private_key(ec.SECP256R1()), "rsa": rsa.generate_private_key(65537, 2048)}


# --- a public key file the server cannot verify with fails the start, naming the setting ---------------------


@pytest.mark.parametrize(
    "algorithm, content, why",
    [
        ("ES256", lambda k: b"-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n", "no PEM public key"),
        ("ES256", lambda k: b"", "it is empty"),
        ("ES256", lambda k: _pem_public(k["rsa"]), "it holds an RSA key"),
        ("RS256", lambda k: _pem_public(k["ec"]), "EC key on curve secp256r1"),
        ("ES256", lambda k: _pem_public(ec.generate_private_key(ec.SECP384R1())), "curve secp384r1"),
        ("ES256", lambda k: _pem_private(k["ec"]), "holds a private key"),
        ("RS256", lambda k: _pem_public(rsa.generate_private_key(65537, 1024)), "RSA key of 1024 bits, too weak"),
    ],
    ids=["garbage", "empty", "rsa-key-for-es256", "ec-key-for-rs256", "p384-for-es256", "private-key", "rsa-1024"],
)
def test_an_unusable_public_key_file_refuses_the_start_naming_the_setting(tmp_path, keys, algorithm, content, why):
    pub = tmp_path / "pub.pem"
    pub.write_bytes(content(keys))
    with pytest.raises(ValueError, match="PEERLOG_AUTH_PUBLIC_KEY_FILE") as refused:
        Verifier(AuthSettings(algorithm=algorithm, public_key_file=pub))
    assert why in str(refused.value)


@pytest.mark.parametrize("algorithm, kind", [("ES256", "ec"), ("RS256", "rsa")])
def test_a_good_public_key_file_verifies_the_tokens_of_its_private_half(tmp_path, keys, algorithm, kind):
    (tmp_path / "pub.pem").write_bytes(_pem_public(keys[kind]))
    (tmp_path / "priv.pem").write_bytes(_pem_private(keys[kind]))
    token = mint(AuthSettings(algorithm=algorithm, private_key_file=tmp_path / "priv.pem"), ["workspace:acme"])
    verifier = Verifier(AuthSettings(algorithm=algorithm, public_key_file=tmp_path / "pub.pem"))
    assert verifier.grant(token).scopes == {"workspace:acme"}


# --- a token no check foresaw is UNAUTHENTICATED, never UNKNOWN ---------------------------------------------


def _signed(payload: dict, secret: str = SECRET) -> str:
    def b64(x: bytes) -> str:
        return base64.urlsafe_b64encode(x).decode().rstrip("=")

    head, body = b64(b'{"alg":"HS256","typ":"JWT"}'), b64(json.dumps(payload).encode())
    return f"{head}.{body}.{b64(hmac.new(secret.encode(), f'{head}.{body}'.encode(), hashlib.sha256).digest())}"


@pytest.mark.parametrize("exp", [10**400, 10**20, float("inf"), float("nan"), -1])
def test_a_signed_exp_that_is_no_time_is_unauthenticated(exp):
    with pytest.raises(Unauthenticated):
        Verifier(AuthSettings(secret=SECRET)).grant(_signed({"scope": "admin", "exp": exp}))


def test_an_unexpected_error_while_verifying_is_unauthenticated_without_library_internals(monkeypatch):
    def broken(*args, **kwargs):
        raise AttributeError("'RSAPrivateKey' object has no attribute 'verify'")

    monkeypatch.setattr(jwt, "decode", broken)
    with pytest.raises(Unauthenticated) as refused:
        Verifier(AuthSettings(secret=SECRET)).grant(mint(AuthSettings(secret=SECRET), ["admin"]))
    assert "attribute" not in str(refused.value)


class _Aborted(Exception):
    pass


async def test_the_interceptor_answers_unauthenticated_when_the_verifier_fails_unexpectedly():
    class Broken:
        def grant(self, token):
            raise OverflowError("cannot convert float infinity to integer")

    async def continuation(details):
        async def behaviour(request, context):
            return "served"

        return grpc.unary_unary_rpc_method_handler(behaviour)

    class Context:
        async def abort(self, code, details):
            self.code, self.details = code, details
            raise _Aborted

    details = SimpleNamespace(
        method="/peerlog.v1.WorkspaceService/ListWorkspaces", invocation_metadata=[("authorization", "Bearer x.y.z")]
    )
    handler = await AuthInterceptor(Broken()).intercept_service(continuation, details)
    context = Context()
    with pytest.raises(_Aborted):
        await handler.unary_unary(object(), context)
    assert context.code == grpc.StatusCode.UNAUTHENTICATED
    assert "float" not in context.details


# --- clocks a little apart --------------------------------------------------------------------------------------


@pytest.mark.parametrize("ahead", [1.5, 2, 30])
def test_a_token_made_on_a_clock_a_little_ahead_is_accepted_within_the_leeway(ahead):
    auth = AuthSettings(secret=SECRET)
    assert auth.leeway_s == 60
    assert Verifier(auth).grant(mint(auth, ["admin"], now=time.time() + ahead)).scopes == {"admin"}


def test_a_token_made_on_a_clock_further_ahead_is_refused_naming_clock_skew():
    auth = AuthSettings(secret=SECRET, leeway_s=5)
    with pytest.raises(Unauthenticated, match=r"not yet valid \(iat.*clock skew"):
        Verifier(auth).grant(mint(auth, ["admin"], now=time.time() + 30))


def test_a_token_expired_within_the_leeway_is_still_accepted_and_one_past_it_is_not():
    auth = AuthSettings(secret=SECRET, leeway_s=60)
    issued = time.time() - 120
    verifier = Verifier(auth)
    assert verifier.grant(_signed({"scope": "admin", "iat": int(issued), "exp": int(time.time()) - 30}))
    with pytest.raises(Unauthenticated, match="expired"):
        verifier.grant(_signed({"scope": "admin", "iat": int(issued), "exp": int(time.time()) - 90}))


# --- token lifetimes ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["2000000000d", "36501d", "5300w", "9" * 5000 + "s", "0" * 5000 + "1" * 20 + "d"])
def test_an_expiry_no_clock_holds_is_refused_in_words(text):
    with pytest.raises(ValueError, match=r"longer than 36500d \(100 years\); leave --expires out"):
        parse_duration(text)


def test_the_longest_expiry_allowed_mints_a_token_that_verifies():
    auth = AuthSettings(secret=SECRET)
    assert Verifier(auth).grant(mint(auth, ["admin"], parse_duration("36500d"))).scopes == {"admin"}


def test_keys_create_with_an_expiry_no_clock_holds_is_one_error_line():
    env = {"PEERLOG_AUTH_SECRET": SECRET}
    result = CliRunner().invoke(app, ["keys", "create", "-w", "acme", "--expires", "2000000000d"], env=env)
    assert result.exit_code == 2 and not isinstance(result.exception, OverflowError)
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: 2000000000d is longer than")


# --- ports ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda p: ApiSettings(port=p),
        lambda p: ApiSettings(metrics_port=p),
        lambda p: ProjectorSettings(metrics_port=p),
        lambda p: WorkerSettings(metrics_port=p),
    ],
    ids=["api", "api-metrics", "projector-metrics", "worker-metrics"],
)
def test_a_port_outside_0_to_65535_is_refused_by_every_settings_class(make):
    for port in (0, 65535):
        make(port)
    for port in (-1, 65536, 99999, 70000):
        with pytest.raises(ValueError, match="(less|greater) than or equal to"):
            make(port)


# --- `peerlog serve` refuses bad settings in one line, exit 2, before anything starts -------------------------


def _serve_refusal(env: dict[str, str]) -> str:
    result = CliRunner().invoke(app, ["serve"], env={"PEERLOG_AUTH_SECRET": SECRET, **env})
    assert result.exit_code == 2, result.output
    assert not isinstance(result.exception, Exception), result.exception
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: "), line
    return line


def test_settings_out_of_range_are_one_line_naming_the_variables_never_their_values():
    line = _serve_refusal({"PEERLOG_API_PORT": "99999", "PEERLOG_API_METRICS_PORT": "70000"})
    assert "PEERLOG_API_PORT: Input should be less than or equal to 65535" in line
    assert "PEERLOG_API_METRICS_PORT" in line and "99999" not in line


@pytest.mark.parametrize(
    "url, said",
    [
        ("postgres://peerlog:hunter2@db/peerlog", "starts with postgres://"),
        ("postgresql://peerlog:hunter2@db/peerlog", "starts with postgresql://"),
        ("postgresql+psycopg2://peerlog:hunter2@db/peerlog", "starts with postgresql+psycopg2://"),
        ("hunter2 is no url", "is no database URL"),
    ],
)
def test_a_database_url_without_the_psycopg_driver_is_refused_before_serving(url, said):
    line = _serve_refusal({"PEERLOG_DATABASE_URL": url})
    assert said in line and "postgresql+psycopg://" in line and "hunter2" not in line


def test_a_weak_secret_with_several_processes_is_refused_before_any_starts():
    line = _serve_refusal({"PEERLOG_AUTH_SECRET": "short", "PEERLOG_API_PROCESSES": "2", "PEERLOG_API_PORT": "1"})
    assert "PEERLOG_AUTH_SECRET must be at least 32 bytes" in line


# --- TLS files gRPC would only say "Failed to bind" about -----------------------------------------------------------


def _tls(tmp_path: Path, cert: bytes, key: bytes) -> ApiSettings:
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    return ApiSettings(tls_cert=tmp_path / "cert.pem", tls_key=tmp_path / "key.pem")


def _self_signed(key) -> bytes:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(ser.Encoding.PEM)


def test_tls_files_that_are_not_what_they_should_be_are_refused_naming_the_setting(tmp_path, keys):
    cert, key = _self_signed(keys["ec"]), _pem_private(keys["ec"])
    assert tls_credentials(_tls(tmp_path, cert, key)) is not None
    with pytest.raises(ValueError, match="PEERLOG_API_TLS_CERT .* holds no PEM certificate"):
        tls_credentials(_tls(tmp_path, b"not a certificate\n", key))
    with pytest.raises(ValueError, match="PEERLOG_API_TLS_KEY .* holds no PEM private key"):
        tls_credentials(_tls(tmp_path, cert, b"not a key\n"))
    with pytest.raises(ValueError, match="PEERLOG_API_TLS_KEY .* is not the key of the certificate"):
        tls_credentials(_tls(tmp_path, cert, _pem_private(keys["rsa"])))
    encrypted = keys["ec"].private_bytes(
        ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.BestAvailableEncryption(b"passphrase")
    )
    with pytest.raises(ValueError, match="PEERLOG_API_TLS_KEY .* is encrypted"):
        tls_credentials(_tls(tmp_path, cert, encrypted))
    api = _tls(tmp_path, cert, key).model_copy(update={"tls_client_ca": tmp_path / "key.pem"})
    with pytest.raises(ValueError, match="PEERLOG_API_TLS_CLIENT_CA .* holds no PEM certificate"):
        tls_credentials(api)


def test_a_bad_certificate_with_several_processes_is_refused_before_any_starts(tmp_path, keys):
    api = _tls(tmp_path, b"not a certificate\n", _pem_private(keys["ec"]))
    settings = Settings(auth=AuthSettings(secret=SECRET), api=api.model_copy(update={"processes": 2, "port": 1}))
    with pytest.raises(ValueError, match="PEERLOG_API_TLS_CERT"):
        check(settings)


# --- the dev stack's state file holds the HS256 secret -------------------------------------------------------


def test_the_dev_stack_state_with_the_secret_is_readable_by_its_owner_only(tmp_path):
    from infra.stack import StackState, _save, _state_file

    _state_file(tmp_path).write_text("{}")
    _state_file(tmp_path).chmod(0o644)  # as an earlier version left it
    _save(StackState(root=str(tmp_path), auth_secret="a" * 64))
    assert stat.S_IMODE(_state_file(tmp_path).stat().st_mode) == 0o600
    assert json.loads(_state_file(tmp_path).read_text())["auth_secret"] == "a" * 64
