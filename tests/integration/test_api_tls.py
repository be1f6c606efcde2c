"""TLS on the API port (PEERLOG_API_TLS_CERT/_KEY) and mutual TLS (PEERLOG_API_TLS_CLIENT_CA), with
certificates this test makes itself."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from peerlog.v1 import workspaces_pb2, workspaces_pb2_grpc
from services.api.channels import aio_channel
from tests.support.auth import admin_token


def _pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _issue(
    name: str, issuer_key, issuer_name: x509.Name | None = None, ca: bool = False, server: bool = False
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate for `name` signed by `issuer_key` (None: by its own key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer_key or key, hashes.SHA256()), key


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path | bytes]:
    """A CA, a server certificate for localhost signed by it, and a client certificate signed by it."""
    ca_cert, ca_key = _issue("peerlog test CA", None, ca=True)
    server, server_key = _issue("localhost", ca_key, ca_cert.subject, server=True)
    client, client_key = _issue("a client", ca_key, ca_cert.subject)
    out = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "server.pem", "key": tmp_path / "server.key"}
    out["ca"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    out["cert"].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    out["key"].write_bytes(_pem(server_key))
    out["client_cert"], out["client_key"] = client.public_bytes(serialization.Encoding.PEM), _pem(client_key)
    return out


async def _serve(settings, **tls):
    from services.api.server import start

    return await start(settings.model_copy(update={"api": settings.api.model_copy(update=tls)}))


async def _list(port: int, settings, credentials: grpc.ChannelCredentials | None) -> list[str]:
    async with aio_channel(f"localhost:{port}", admin_token(settings), credentials) as channel:
        reply = await workspaces_pb2_grpc.WorkspaceServiceStub(channel).ListWorkspaces(
            workspaces_pb2.ListWorkspacesRequest(), timeout=10
        )
    return [w.workspace_id for w in reply.workspaces]


async def test_the_api_serves_tls_only_when_given_a_certificate(settings, pki):
    server = await _serve(settings, tls_cert=pki["cert"], tls_key=pki["key"])
    try:
        trusted = grpc.ssl_channel_credentials(root_certificates=pki["ca"].read_bytes())
        assert await _list(server.port, settings, trusted) == []
        with pytest.raises(grpc.aio.AioRpcError) as plain:  # a plaintext client gets no answer
            await _list(server.port, settings, None)
        assert plain.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.aio.AioRpcError) as untrusted:  # nor one that does not trust the certificate
            await _list(server.port, settings, grpc.ssl_channel_credentials())
        assert untrusted.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(0)


async def test_mutual_tls_admits_only_clients_with_a_certificate_from_the_client_ca(settings, pki):
    server = await _serve(settings, tls_cert=pki["cert"], tls_key=pki["key"], tls_client_ca=pki["ca"])
    try:
        ca = pki["ca"].read_bytes()
        with_cert = grpc.ssl_channel_credentials(ca, pki["client_key"], pki["client_cert"])
        assert await _list(server.port, settings, with_cert) == []
        with pytest.raises(grpc.aio.AioRpcError) as anonymous:
            await _list(server.port, settings, grpc.ssl_channel_credentials(ca))
        assert anonymous.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(0)


def test_tls_settings_come_in_pairs():
    from services.api.settings import ApiSettings

    with pytest.raises(ValueError, match="set both or neither"):
        ApiSettings(tls_cert=Path("a.pem"))
    with pytest.raises(ValueError, match="mutual TLS"):
        ApiSettings(tls_client_ca=Path("ca.pem"))


async def test_a_file_that_is_no_certificate_refuses_the_start_naming_the_setting(settings, pki, tmp_path):
    # gRPC said only "Failed to bind to address", in a traceback
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    with pytest.raises(ValueError, match="PEERLOG_API_TLS_CERT .* holds no PEM certificate"):
        await _serve(settings, tls_cert=tmp_path / "garbage.pem", tls_key=pki["key"])
    with pytest.raises(ValueError, match="PEERLOG_API_TLS_KEY .* holds no PEM private key"):
        await _serve(settings, tls_cert=pki["cert"], tls_key=tmp_path / "garbage.pem")


@pytest.mark.parametrize("port", [65536 + 50051, -1])
async def test_a_port_no_socket_has_refuses_the_start(settings, port):
    # gRPC took 65536 + N as N: the server listened on another port than the one set
    from services.api.settings import ApiSettings

    with pytest.raises(ValueError, match="less than or equal to 65535|greater than or equal to 0"):
        ApiSettings(port=port)
    with pytest.raises(ValueError, match="is no port"):  # settings made in code skip validation
        await _serve(settings, port=port)


async def test_peerlog_audit_reaches_an_api_that_serves_tls_only_given_its_ca(settings, pki):
    # it always dialled in plaintext: "UNAVAILABLE … Socket closed; check that the API runs", with no way round
    import asyncio

    from typer.testing import CliRunner

    from services.cli.main import app
    from tests.support.processes import settings_env

    server = await _serve(settings, tls_cert=pki["cert"], tls_key=pki["key"])
    env = {**settings_env(settings), "PEERLOG_AUTH_TOKEN": admin_token(settings)}
    audit = ["audit", "no-such-observation", "-w", "w", "--address", f"localhost:{server.port}"]
    try:
        with_ca = await asyncio.to_thread(
            CliRunner().invoke, app, audit, env={**env, "PEERLOG_AUTH_TLS_CA": str(pki["ca"])}
        )
        plain = await asyncio.to_thread(CliRunner().invoke, app, audit, env=env)
    finally:
        await server.stop(0)
    assert with_ca.exit_code == 2 and "error: NOT_FOUND" in with_ca.output, with_ca.output  # it got an answer
    assert plain.exit_code == 2 and "UNAVAILABLE" in plain.output and "PEERLOG_AUTH_TLS_CA" in plain.output
