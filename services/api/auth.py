"""The authentication interceptor: verify the caller's bearer token, then check what the request touches
against the one table (access.RULES) before any servicer runs. Health and reflection stay open."""

from __future__ import annotations

import asyncio
import inspect
import logging
from contextvars import ContextVar

import grpc

from services.api import access
from services.api.errors import Undecodable
from services.api.tokens import ADMIN, Grant, NarrowView, Verifier
from services.errors import Unauthenticated

OPEN_SERVICES = frozenset(
    {
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    }
)
_grant: ContextVar[Grant | None] = ContextVar("peerlog_grant", default=None)
log = logging.getLogger(__name__)


def visible_workspaces() -> frozenset[str] | None:
    """The workspaces the current call's token may list; None: every one (admin, or auth off)."""
    grant = _grant.get()
    return None if grant is None else grant.workspaces()


def narrow_view(workspace_id: str) -> NarrowView | None:
    """What the current call's token covers of a workspace when less than the whole of it; None: all of
    it (admin, a workspace token, or auth off)."""
    grant = _grant.get()
    return None if grant is None else grant.within(workspace_id)


def bearer(metadata) -> str:
    """The token of an 'authorization: Bearer <token>' header; Unauthenticated without one."""
    for key, value in metadata or ():
        if key == "authorization":
            scheme, _, token = str(value).partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            raise Unauthenticated("the authorization header is not 'Bearer <token>'")
    raise Unauthenticated(
        "no token: send the header 'authorization: Bearer <token>' (make a token with `peerlog keys create`)"
    )


def refusal(grant: Grant, method: str, request) -> str | None:
    """Why `grant` may not make this call, naming the scope it needs; None when it may."""
    rule = access.rule_for(method)
    if rule is None:  # a method the table forgot (a unit test catches it): only admin, never silently open
        return None if ADMIN in grant.scopes else f"{method} has no access rule; only an admin token may call it"
    for need in rule(request):
        if not any(grant.covers(r) for r in need):
            return (
                f"{method.rpartition('/')[2]} here needs scope {access.need_text(need)}{access.hint(method, request)}"
            )
    return None


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """UNAUTHENTICATED without a valid token; PERMISSION_DENIED when its scopes do not cover the request.

    Outermost: it answers before the error interceptor and the servicers, so a refused call does nothing."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.lstrip("/").partition("/")[0] in OPEN_SERVICES:
            return handler
        try:
            grant, unauthenticated = self.verifier.grant(bearer(details.invocation_metadata)), None
        except Unauthenticated as exc:
            grant, unauthenticated = None, str(exc)
        except Exception:  # a token no check foresaw is refused as one, never UNKNOWN with library internals
            log.exception("verifying a token failed unexpectedly")
            grant, unauthenticated = None, "the token could not be verified"

        async def authenticate(context: grpc.aio.ServicerContext) -> None:
            if unauthenticated is not None:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, unauthenticated)

        async def admit(request, context: grpc.aio.ServicerContext) -> None:
            await authenticate(context)
            # an undecodable request touches nothing: the error interceptor inside refuses it
            why = None if isinstance(request, Undecodable) else refusal(grant, details.method, request)
            if why is not None:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
            _grant.set(grant)

        async def still_valid(context: grpc.aio.ServicerContext) -> None:
            if grant is not None and grant.lapsed():
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, EXPIRED_MID_STREAM)

        return _admitting(handler, authenticate, admit, still_valid)


EXPIRED_MID_STREAM = (
    "the token expired while the stream was open: reconnect with a new one (`peerlog keys create`), "
    "from the last cursor you processed"
)


def _admitting(handler: grpc.RpcMethodHandler, authenticate, admit, still_valid) -> grpc.RpcMethodHandler:
    """`handler` with `admit(request, context)` awaited before it runs (unary, server- and client-streaming),
    and a server stream's every item sent only while `still_valid(context)` lets it."""
    if handler.unary_unary is not None:
        inner = handler.unary_unary

        async def unary(request, context):
            await admit(request, context)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(unary, handler.request_deserializer, handler.response_serializer)
    if handler.unary_stream is not None and inspect.isasyncgenfunction(handler.unary_stream):
        inner_stream = handler.unary_stream

        async def stream(request, context):
            await admit(request, context)
            async for item in inner_stream(request, context):
                await still_valid(context)  # a stream outlives no token: nothing goes out past its exp
                yield item

        return grpc.unary_stream_rpc_method_handler(stream, handler.request_deserializer, handler.response_serializer)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            _admitting_stream(handler, authenticate, admit), handler.request_deserializer, handler.response_serializer
        )
    raise TypeError("peerlog serves unary, server-streaming (async generator) and client-streaming RPCs only")


# how long a client stream may take to send its first request: a call holds one of the server's
# PEERLOG_API_MAX_CONCURRENT_RPCS slots while it waits, and streams that sent nothing took them all
FIRST_REQUEST_S = 30.0


def _admitting_stream(handler: grpc.RpcMethodHandler, authenticate, admit):
    """A client stream is admitted by its first request, which names what the call touches (an empty
    stream by an empty request); the handler then gets the whole stream, that request first. Its token is
    checked before that request is awaited, and the request must come within FIRST_REQUEST_S."""
    inner = handler.stream_unary

    async def upload(requests, context):
        await authenticate(context)
        try:
            first = await asyncio.wait_for(anext(aiter(requests), None), FIRST_REQUEST_S)
        except TimeoutError:
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no request came within {FIRST_REQUEST_S:g} s of the call's start: send the first one at once",
            )
        await admit(first if first is not None else handler.request_deserializer(b""), context)

        async def whole():
            if first is not None:
                yield first
            async for request in requests:
                yield request

        return await inner(whole(), context)

    return upload
