"""What the sync and the asyncio client share, free of I/O: a call's description, which calls may be
retried and after how long, the consistency token carried from writes to reads, the call metadata."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc
from google.protobuf.message import Message as Proto

T = TypeVar("T")

# Writes that carry an idempotency key may be retried: the server answers a repeat of a key with the first
# reply and writes nothing (AddMessages, CreateObservations). The client fills the field with one key per
# logical call, kept across retries, unless the caller gave one.
IDEMPOTENCY_KEY_FIELD = "idempotency_key"


@dataclass(frozen=True)
class Call(Generic[T]):
    """One RPC: the stub class and method to call, the request, and how to turn the reply into T."""

    stub: type
    method: str
    request: Proto
    convert: Callable[[Any], T]


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of UNAVAILABLE: at most `max_attempts` calls in all, waiting between them an exponential
    backoff (initial_backoff × multiplier^n, capped at max_backoff) with jitter (each wait a random
    50-100 % of that), and never past the call's deadline. Reads are retried; writes only when they
    carry an idempotency key."""

    max_attempts: int = 5
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0

    def backoff(self, retry: int, rand: Callable[[], float] = random.random) -> float:
        """The wait before retry number `retry` (1 for the first)."""
        cap = min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1))
        return cap * (0.5 + rand() / 2)


NO_RETRY = RetryPolicy(max_attempts=1)


# writes that read first and so take a consistency token too (a clone copies what the source holds); they
# are not repeated on a failure: the first try may have written
WRITES_THAT_READ = frozenset({"CloneSessionRequest", "SetMessageConfigurationRequest", "DeleteObservationRequest"})


def waits_for_writes(request: Proto) -> bool:
    """Requests that take a consistency token: every read, and the writes in WRITES_THAT_READ."""
    return "consistency" in request.DESCRIPTOR.fields_by_name


# reads whose request has no consistency field, so that field cannot tell them from writes: named here, or
# UNAVAILABLE would fail them at once, against the README's word that reads are retried
READS_WITHOUT_TOKEN = frozenset({"ListWebhooksRequest", "ListWebhookDeadLettersRequest", "SubscribeRequest"})


def is_read(request: Proto) -> bool:
    """Reads change nothing and may be repeated."""
    name = request.DESCRIPTOR.name
    return name in READS_WITHOUT_TOKEN or (waits_for_writes(request) and name not in WRITES_THAT_READ)


def may_retry(request: Proto) -> bool:
    return is_read(request) or bool(sent_under(request))


def sent_under(request: Proto) -> str | None:
    """The idempotency key of a keyed write (after `CallContext.start`, the one it mints), else None: a
    failed write's error carries it, since only a repeat under it is safe once the write may have landed."""
    return getattr(request, IDEMPOTENCY_KEY_FIELD, "") or None


# what an asyncio call raises when its channel is closed under it, named here (not in _async.py) so that the
# sync twin, the same text, names something real; its calls never raise it
CANCELLED = asyncio.CancelledError


def cancelled_by_caller() -> bool:
    """Whether the running asyncio task itself is being cancelled, not only a call it awaits."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class Attempts:
    """The attempts of one call: its deadline, and whether and when to try again after a failure."""

    def __init__(
        self,
        policy: RetryPolicy,
        timeout: float,
        retryable: bool,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._policy = policy if retryable else NO_RETRY
        self._clock, self._rand = clock, rand
        self._deadline = clock() + timeout
        self.made = 0

    def remaining(self) -> float:
        """Seconds left for the next attempt (counts it as made)."""
        self.made += 1
        return max(self._deadline - self._clock(), 0.0)

    def retry_after(self, error: grpc.RpcError) -> float | None:
        """Seconds to wait before trying again, or None: give up and raise `error`."""
        if not hasattr(error, "code") or error.code() != grpc.StatusCode.UNAVAILABLE:
            return None
        if self.made >= self._policy.max_attempts:
            return None
        wait = self._policy.backoff(self.made, self._rand)
        return wait if self._clock() + wait < self._deadline else None


class ReadYourWrites:
    """The log positions of every write this client made, merged, to send with its reads.

    A token is `topic:partition:offset` parts joined by commas; merging keeps the highest offset of each
    (topic, partition), so a read waits for all of this client's writes, not only the last. A token of
    another form is kept as it is (the last one seen wins), so a change of format degrades to
    "the last write" rather than breaking."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the sync client may be shared by threads
        self._positions: dict[tuple[str, str], int] = {}
        self._opaque = ""

    @property
    def token(self) -> str:
        with self._lock:
            if self._opaque:
                return self._opaque
            return ",".join(f"{t}:{p}:{o}" for (t, p), o in sorted(self._positions.items()))

    def remember(self, token: str) -> None:
        """`observe` for a token a caller hands over: refused unless it is `topic:partition:offset` parts."""
        if _positions(token.strip()) is None:
            raise ValueError(f"not a consistency token peerlog returns (topic:partition:offset, …): {token[:80]!r}")
        self.observe(token.strip())

    def forget(self) -> None:
        with self._lock:
            self._positions, self._opaque = {}, ""

    def observe(self, token: str) -> None:
        if not token:
            return
        positions = _positions(token)
        with self._lock:
            if positions is None:
                self._opaque, self._positions = token, {}
                return
            self._opaque = ""
            for key, offset in positions.items():
                self._positions[key] = max(offset, self._positions.get(key, -1))


def _positions(token: str) -> dict[tuple[str, str], int] | None:
    out: dict[tuple[str, str], int] = {}
    for part in token.split(","):
        pieces = part.rsplit(":", 2)
        if len(pieces) != 3 or not pieces[0] or not pieces[1].isdigit() or not pieces[2].lstrip("-").isdigit():
            return None
        topic, partition, offset = pieces
        out[(topic, partition)] = max(int(offset), out.get((topic, partition), -1))
    return out


class CallContext:
    """Per client: the deadline of every call, its retry policy, its metadata, its consistency token."""

    def __init__(self, token: str | None, timeout: float, retry: RetryPolicy) -> None:
        self.timeout = timeout
        self.retry = retry
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self.writes = ReadYourWrites()

    def start(self, request: Proto, timeout: float | None = None) -> Attempts:
        """Ready `request` to send: a read carries this client's consistency token (unless the caller set
        one), a write that can carry an idempotency key gets one. Returns the call's attempts."""
        if waits_for_writes(request) and not request.consistency.consistency_token:
            request.consistency.consistency_token = self.writes.token
        if IDEMPOTENCY_KEY_FIELD in request.DESCRIPTOR.fields_by_name and not getattr(request, IDEMPOTENCY_KEY_FIELD):
            setattr(request, IDEMPOTENCY_KEY_FIELD, str(uuid.uuid4()))
        return Attempts(self.retry, self.timeout if timeout is None else timeout, may_retry(request))

    def received(self, response: Proto) -> None:
        """Remember the log position of a write's reply."""
        if "consistency_token" in response.DESCRIPTOR.fields_by_name:
            self.writes.observe(response.consistency_token)
