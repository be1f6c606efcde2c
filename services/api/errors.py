"""The one table from domain errors to gRPC status codes, and the interceptor that applies it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import grpc

from services.bus.consistency import InvalidConsistencyToken
from services.bus.producer import AppendFailed
from services.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from services.llm.errors import ModelError, ModelUnavailable

log = logging.getLogger(__name__)

STATUS_OF: dict[type[Exception], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidConsistencyToken: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    AppendFailed: grpc.StatusCode.UNAVAILABLE,
    ModelUnavailable: grpc.StatusCode.UNAVAILABLE,  # the embedding endpoint of a search or write
    # Chat's model: rejected requests and output still invalid after a repair are the server's, not the caller's
    ModelError: grpc.StatusCode.UNAVAILABLE,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
}
HANDLED = tuple(STATUS_OF)  # what the interceptor turns into a status; anything else is a bug


def status_for(exc: Exception) -> grpc.StatusCode | None:
    for cls in type(exc).__mro__:
        if cls in STATUS_OF:
            return STATUS_OF[cls]
    return None


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Turns domain errors raised by unary and server-streaming handlers into gRPC statuses with their message."""

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
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _guarded_stream(handler.unary_stream, details.method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler


async def _abort(context: grpc.aio.ServicerContext, exc: Exception, method: str) -> None:
    if isinstance(exc, HANDLED):
        await context.abort(status_for(exc), str(exc))
    # a bug, not the caller's fault: keep internals out of the reply, keep them in the log
    log.exception("unexpected error in %s", method)
    await context.abort(grpc.StatusCode.INTERNAL, "internal error; the server log has the details")


def _guarded(inner, method: str):
    async def guarded(request, context: grpc.aio.ServicerContext):
        try:
            return await inner(request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, method)

    return guarded


def _guarded_stream(inner, method: str):
    async def guarded(request, context: grpc.aio.ServicerContext):
        try:
            async for item in inner(request, context):
                yield item
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, method)

    return guarded
