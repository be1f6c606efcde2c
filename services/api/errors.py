"""The one table from domain errors to gRPC status codes, and the interceptor that applies it."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable

import grpc
from google.protobuf.message import DecodeError
from sqlalchemy import exc as sa

from projections.outages import database_error_line
from services.bus.consistency import InvalidConsistencyToken
from services.bus.producer import AppendFailed, AppendUnresolved
from services.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from services.llm.errors import EmbeddingError, ModelError, ModelUnavailable, RerankError, TokenizerUnavailable

log = logging.getLogger(__name__)

STATUS_OF: dict[type[Exception], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidConsistencyToken: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    AppendFailed: grpc.StatusCode.UNAVAILABLE,
    AppendUnresolved: grpc.StatusCode.DEADLINE_EXCEEDED,  # gRPC's word for "it may have happened"
    ModelUnavailable: grpc.StatusCode.UNAVAILABLE,  # Chat's model, or the embedding endpoint of a search or write
    # Chat's model refused the request (4xx), or its output is still invalid after a repair: the server's
    # fault, not the caller's, and not one a retry mends (UNAVAILABLE would have clients re-run the Chat)
    ModelError: grpc.StatusCode.INTERNAL,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    # infrastructure that is down or missing, not a bug: a retry (after an operator acts) can succeed
    sa.OperationalError: grpc.StatusCode.UNAVAILABLE,  # Postgres unreachable, restarting, or dropped us
    sa.InterfaceError: grpc.StatusCode.UNAVAILABLE,  # the connection broke under the driver
    sa.TimeoutError: grpc.StatusCode.UNAVAILABLE,  # no pooled connection came free in time
    EmbeddingError: grpc.StatusCode.UNAVAILABLE,  # the embedding model is missing or answers wrongly
    TokenizerUnavailable: grpc.StatusCode.UNAVAILABLE,
    RerankError: grpc.StatusCode.UNAVAILABLE,  # the re-ranking model is missing or corrupt
}
HANDLED = tuple(STATUS_OF)  # what the interceptor turns into a status; anything else is a bug
# their text names hosts, paths and SQL: the caller gets this instead, the log gets the details
PUBLIC_MESSAGE: dict[type[Exception], str] = {
    sa.OperationalError: "the projections database is unavailable; retry later",
    sa.InterfaceError: "the projections database is unavailable; retry later",
    sa.TimeoutError: "the projections database is overloaded; retry later",
    EmbeddingError: "the embedding model is unavailable; retry later",
    TokenizerUnavailable: "the tokenizer is unavailable; retry later",
    RerankError: "the re-ranking model is unavailable; search without rerank, or retry later",
}


# a status message travels percent-encoded (up to 3 bytes per byte) in a header, and headers are capped at
# 16 KB: a longer message reaches the caller as RESOURCE_EXHAUSTED "Stream removed" instead of the refusal
MAX_DETAILS_BYTES = 2_000


def fitted(message: str) -> str:
    """`message`, cut to at most MAX_DETAILS_BYTES of UTF-8 with a note of how much was left out.

    A backstop: error builders bound what they quote (`validation.listed`); this keeps one that does not
    from turning a refusal into a transport error."""
    if len(message.encode()) <= MAX_DETAILS_BYTES:
        return message
    head = message.encode()[: MAX_DETAILS_BYTES - 40].decode(errors="ignore")
    return f"{head}… ({len(message) - len(head)} more characters)"


def status_for(exc: Exception) -> grpc.StatusCode | None:
    for cls in type(exc).__mro__:
        if cls in STATUS_OF:
            return STATUS_OF[cls]
    return None


def public_message(exc: Exception) -> str | None:
    """The message an infrastructure error reaches the caller with (a fixed one; a model error's text
    without what the provider's server sent); None for a domain error, whose own message is for the caller."""
    if isinstance(exc, ModelError):
        return exc.public
    for cls in type(exc).__mro__:
        if cls in PUBLIC_MESSAGE:
            return PUBLIC_MESSAGE[cls]
    return None


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Turns domain errors raised by unary, server-streaming and client-streaming handlers into gRPC statuses
    with their message."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _guarded(handler.unary_unary, details.method),
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _guarded_stream(handler.unary_stream, details.method),
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                _guarded_upload(handler.stream_unary, details.method),
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler


class Undecodable:
    """A request body that did not parse (invalid UTF-8 in a string, nesting too deep, truncated bytes)."""

    def __init__(self, error: DecodeError) -> None:
        self.error = error


def _tolerant(deserialize):
    # grpc aio calls the deserializer outside any handler and answers its exception with UNKNOWN, and
    # a deserializer has no context to abort with: so hand the failure to the handler as a value instead
    if deserialize is None:
        return None

    def tolerant(data: bytes):
        try:
            return deserialize(data)
        except DecodeError as exc:
            return Undecodable(exc)

    return tolerant


async def _refuse_undecodable(request, context: grpc.aio.ServicerContext) -> None:
    if isinstance(request, Undecodable):
        shown = str(request.error)[:300]
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"the request is not a valid message: {shown}")


def _for_the_log(exc: Exception) -> str:
    """One line on what failed. A database error's own text runs over many lines, and the statement it
    quotes can hold the caller's words."""
    if isinstance(exc, sa.DBAPIError):
        return database_error_line(exc)
    return f"{type(exc).__name__}: {exc}"


async def _abort(context: grpc.aio.ServicerContext, exc: Exception, method: str) -> None:
    if isinstance(exc, HANDLED):
        fixed = public_message(exc)
        if fixed is not None:  # the operator needs what the caller does not see
            log.warning("%s: %s", method, _for_the_log(exc))
        await context.abort(status_for(exc), fitted(fixed or str(exc)))
    # a bug, not the caller's fault: keep internals out of the reply, keep them in the log
    log.exception("unexpected error in %s", method)
    await context.abort(grpc.StatusCode.INTERNAL, "internal error; the server log has the details")


def _guarded(inner, method: str):
    async def guarded(request, context: grpc.aio.ServicerContext):
        await _refuse_undecodable(request, context)
        try:
            return await inner(request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, method)

    return guarded


async def _decoded(requests):
    """A client stream's requests; one that did not parse ends the call as INVALID_ARGUMENT (raised inside
    the handler, so whatever it received so far is dropped unwritten)."""
    async for request in requests:
        if isinstance(request, Undecodable):
            raise InvalidArgument(f"a request of the stream is not a valid message: {str(request.error)[:300]}")
        yield request


def _guarded_upload(inner, method: str):
    """A client-streaming handler, guarded as a unary one."""

    async def guarded(requests, context: grpc.aio.ServicerContext):
        try:
            return await inner(_decoded(requests), context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, method)

    return guarded


def _guarded_stream(inner, method: str):
    if not inspect.isasyncgenfunction(inner):
        # a streaming handler that writes with context.write instead of yielding (grpc's Health.Watch):
        # iterating over it would fail with INTERNAL; awaiting it keeps it a writer
        return _guarded(inner, method)

    async def guarded(request, context: grpc.aio.ServicerContext):
        await _refuse_undecodable(request, context)
        try:
            async for item in inner(request, context):
                yield item
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, method)

    return guarded
