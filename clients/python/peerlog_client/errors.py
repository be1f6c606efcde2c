"""Exceptions: one class per gRPC status code, each keeping the server's message."""

from __future__ import annotations

import grpc


class PeerlogError(Exception):
    """A call failed. `str(error)` is the server's message; `code` the gRPC status code; `idempotency_key`
    the key a keyed write was sent under (None for other calls)."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, *, attempts: int = 1, idempotency_key: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.attempts = attempts  # calls made, retries included
        # a write that failed DEADLINE_EXCEEDED or UNAVAILABLE may be on the log all the same: repeated under
        # this key it is stored once, under a fresh one (the client's default) twice
        self.idempotency_key = idempotency_key

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class Cancelled(PeerlogError):
    code = grpc.StatusCode.CANCELLED


class Unknown(PeerlogError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(PeerlogError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(PeerlogError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(PeerlogError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(PeerlogError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(PeerlogError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(PeerlogError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(PeerlogError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(PeerlogError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(PeerlogError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(PeerlogError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(PeerlogError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(PeerlogError):
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(PeerlogError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(PeerlogError):
    code = grpc.StatusCode.UNAUTHENTICATED


class ClientClosed(Cancelled):
    """A call on a client after its close(): make a new client (raised before the call's next attempt is
    sent, or by the asyncio client for a call its close() cut off; a keyed write's attempt may have landed,
    so repeat it under `idempotency_key`)."""

    def __init__(self, idempotency_key: str | None = None, attempts: int = 0) -> None:
        super().__init__(
            "this peerlog client was closed; make a new one to call peerlog again",
            attempts=attempts,
            idempotency_key=idempotency_key,
        )


# the one table from status code to exception, read off the classes' own `code`
ERROR_OF: dict[grpc.StatusCode, type[PeerlogError]] = {cls.code: cls for cls in PeerlogError.__subclasses__()}


def from_rpc_error(error: grpc.RpcError, attempts: int = 1, idempotency_key: str | None = None) -> PeerlogError:
    """The exception for a failed call: its class by status code, its text the server's message, and the
    idempotency key the call was sent under, if any."""
    # grpc.aio's errors are not grpc.Call, but both kinds have code() and details()
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = (error.details() if hasattr(error, "details") else None) or code.name
    return ERROR_OF.get(code, Unknown)(message, attempts=attempts, idempotency_key=idempotency_key)
