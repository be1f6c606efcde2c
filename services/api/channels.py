"""Client channels that send a bearer token with every call (the CLI, the demo, the benches, the tests)."""

from __future__ import annotations

import collections
from pathlib import Path

import grpc


def _with_token(details, token: str):
    return details._replace(metadata=[*(details.metadata or ()), ("authorization", f"Bearer {token}")])


# two classes: an asyncio channel files each interceptor under the first kind it is (if/elif), so one
# class of both kinds would never see a streaming call (ChatStream went out without its token)
class _AioBearer(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(_with_token(client_call_details, self.token), request)


class _AioStreamBearer(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(_with_token(client_call_details, self.token), request)


class _AioUploadBearer(grpc.aio.StreamUnaryClientInterceptor):
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return await continuation(_with_token(client_call_details, self.token), request_iterator)


class _Details(
    collections.namedtuple(
        "_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self.token = token

    def _details(self, d):
        return _with_token(
            _Details(d.method, d.timeout, d.metadata, d.credentials, d.wait_for_ready, getattr(d, "compression", None)),
            self.token,
        )

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)


def aio_channel(
    address: str, token: str = "", credentials: grpc.ChannelCredentials | None = None, options=None
) -> grpc.aio.Channel:
    """An asyncio channel to `address` sending `token` (none when empty); TLS with `credentials`."""
    interceptors = [_AioBearer(token), _AioStreamBearer(token), _AioUploadBearer(token)] if token else None
    if credentials is not None:
        return grpc.aio.secure_channel(address, credentials, options=options, interceptors=interceptors)
    return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)


def channel(
    address: str, token: str = "", options=None, credentials: grpc.ChannelCredentials | None = None
) -> grpc.Channel:
    """A blocking channel to `address` sending `token` (none when empty); TLS with `credentials`."""
    if credentials is not None:
        plain = grpc.secure_channel(address, credentials, options=options)
    else:
        plain = grpc.insecure_channel(address, options=options)
    return grpc.intercept_channel(plain, _Bearer(token)) if token else plain


def tls_to(ca_file: Path | None) -> grpc.ChannelCredentials | None:
    """TLS credentials verifying the server with the CA certificate(s) in `ca_file`; None (plain) without one."""
    return grpc.ssl_channel_credentials(root_certificates=ca_file.read_bytes()) if ca_file is not None else None
