"""The message writer: turns queued in order and sent when writeFrequency says; a failed send keeps them,
unless the server refused them for good."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from peerlog_client.errors import DeadlineExceeded, PeerlogError, ResourceExhausted, Unavailable
from peerlog_client.models import NewMessage

log = logging.getLogger("peerlog_client.memory")
MAX_PER_APPEND = 100  # the server's limit on messages in one AddMessages
RETRY_S = 0.5  # the first pause after a failed send; each failure in a row doubles it, up to RETRY_MAX_S
RETRY_MAX_S = 30.0  # an outage is not met by a retry (and a warning) every half second for its length
# the statuses a retry can mend; any other status would be answered the same way every time
TRANSIENT = (Unavailable, DeadlineExceeded, ResourceExhausted)
PREVIEW_CHARS = 60  # of each dropped message, in the log


@dataclass(frozen=True)
class Pending:
    session: str
    message: NewMessage


@dataclass(frozen=True)
class Batch:
    """The oldest queued messages of one session, and the idempotency key every attempt to send them uses."""

    items: tuple[Pending, ...]
    key: str


class Writer:
    """Queued messages, sent in order by `send(session, messages, key)` (which raises on failure). `flush`
    sends what is queued, oldest first, at most one flush at a time; what a failure leaves stays queued. In
    `async` mode a background thread flushes whenever something is queued and retries after failures.

    A send that timed out may still have landed, so a failed batch is kept as it was, key and all, until
    it is acknowledged: the retry is then the same write, and the server answers it without appending twice.
    A batch the server refused for good (INVALID_ARGUMENT, PERMISSION_DENIED, ...), or that could not be
    turned into a request (ValueError, TypeError), is logged and dropped: kept, it would fail again forever
    and hold back every batch queued after it."""

    def __init__(
        self,
        send: Callable[[str, list[NewMessage], str], None],
        background: bool,
        on_failure: Callable[[Exception], None],
    ) -> None:
        self._send, self._on_failure = send, on_failure
        self._queue: deque[Pending] = deque()
        self._batch: Batch | None = None  # formed, not yet acknowledged
        self._lock = threading.Lock()  # the queue
        self._flushing = threading.Lock()  # one flush at a time, so order holds
        self._wake = threading.Event()
        self._stop = threading.Event()  # set by close(): the thread ends, and a pause of its is cut short
        self._thread = threading.Thread(target=self._run, name="peerlog-writer", daemon=True) if background else None
        if self._thread:
            self._thread.start()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def add(self, session: str, messages: list[NewMessage]) -> None:
        with self._lock:
            self._queue.extend(Pending(session, m) for m in messages)
        self._wake.set()

    def flush(self, timeout: float) -> bool:
        """Send what is queued; True when the queue was emptied within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        if not self._flushing.acquire(timeout=max(timeout, 0.0)):
            return False
        try:
            while time.monotonic() < deadline:
                batch = self._next_batch()
                if batch is None:
                    return True
                try:
                    self._send(batch.items[0].session, [p.message for p in batch.items], batch.key)
                except Exception as error:  # noqa: BLE001 - fail open: report, go on
                    self._on_failure(error)
                    if not refused_for_good(error):
                        return False  # kept, key and all, for the retry
                    _log_dropped(batch, error)
                self._settle(batch)
            return not self.pending
        finally:
            self._flushing.release()

    def _next_batch(self) -> Batch | None:
        """The unacknowledged batch, else a new one: the oldest messages of one session, at most
        MAX_PER_APPEND, left queued until sent. None when nothing is queued."""
        with self._lock:
            if self._batch is None and self._queue:
                items: list[Pending] = []
                for item in self._queue:
                    if len(items) == MAX_PER_APPEND or (items and item.session != items[0].session):
                        break
                    items.append(item)
                self._batch = Batch(tuple(items), uuid.uuid4().hex)
            return self._batch

    def _settle(self, batch: Batch) -> None:
        """Take the current batch, acknowledged or dropped, off the head of the queue."""
        with self._lock:
            for _ in batch.items:
                self._queue.popleft()
            self._batch = None

    def _run(self) -> None:
        pause = RETRY_S
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            if self.flush(timeout=60.0):
                pause = RETRY_S
            elif not self._stop.is_set():
                self._stop.wait(pause)
                pause = min(pause * 2, RETRY_MAX_S)
                self._wake.set()

    def close(self, timeout: float) -> bool:
        """Stop the background thread and send what is left, retrying what fails transiently until
        `timeout` seconds have passed in all; True when nothing is left."""
        deadline = time.monotonic() + timeout
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout)
        done = self._flush_until(deadline)
        if not done:
            log.warning("peerlog memory: %d message(s) not written at close", self.pending)
        return done

    def _flush_until(self, deadline: float) -> bool:
        """Flush, and after a transient failure again (pausing RETRY_S, doubled each time) until `deadline`:
        at close there is no later flush to leave the rest to."""
        pause = RETRY_S / 5
        while not self.flush(deadline - time.monotonic()):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, RETRY_MAX_S)
        return True


# raised while the request is built, before anything is sent (a lone surrogate, a value of the wrong
# type): the same messages would fail the same way every time
UNSENDABLE = (ValueError, TypeError)  # UnicodeError is a ValueError


def refused_for_good(error: Exception) -> bool:
    """True when the server answered with a status that a retry of the same write cannot change, or the
    request could not even be built."""
    # anything else (a transient status, a timeout or broken connection below the client) may still mend
    if isinstance(error, PeerlogError):
        return not isinstance(error, TRANSIENT)
    return isinstance(error, UNSENDABLE)


def _log_dropped(batch: Batch, error: Exception) -> None:
    held = "; ".join(
        f"{p.message.peer_id}: {p.message.content[:PREVIEW_CHARS]!r} ({len(p.message.content)} chars)"
        for p in batch.items
    )
    log.error(
        "peerlog memory: dropped %d message(s) of session %s, refused for good (%r): %s",
        len(batch.items),
        batch.items[0].session,
        error,
        held,
    )
