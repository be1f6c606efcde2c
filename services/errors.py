"""Domain errors. Every layer raises these; the API maps them to gRPC status codes in one table."""

from __future__ import annotations


class DomainError(Exception):
    """An error a caller can act on; the message says what to change."""


class InvalidArgument(DomainError):
    pass


class NotFound(DomainError):
    pass


class AlreadyExists(DomainError):
    pass


class FailedPrecondition(DomainError):
    pass


class PermissionDenied(DomainError):
    """The request would break scoping (e.g. a pair's store citing what its observer never saw), or the
    caller's token does not reach what it touches."""


class Unauthenticated(DomainError):
    """No token, or one that does not verify: expired, badly signed, malformed, without a scope."""


class ResourceExhausted(DomainError):
    """A per-process limit is reached (open streams); retrying once some are released may succeed."""


class Unavailable(DomainError):
    """A dependency (log, projections) is down or lagging; retrying later may succeed."""


class DeadlineExceeded(DomainError):
    """The work did not finish within its time limit; nothing was written."""
