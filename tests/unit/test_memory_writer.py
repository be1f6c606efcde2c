"""The memory provider's writer: what a transient failure leaves is retried as the same write; what the
server refuses for good is dropped, so it cannot hold back the batches queued after it."""

import logging
import threading
import time

import pytest

from peerlog_client.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from peerlog_client.memory.writer import Writer
from peerlog_client.models import NewMessage


class LandsThenTimesOut:
    """A server that appends, then the answer is lost on its way back (a deadline), the first N times."""

    def __init__(self, lost_answers: int) -> None:
        self.lost_answers, self.seen, self.landed = lost_answers, [], {}

    def __call__(self, session: str, messages: list[NewMessage], key: str) -> None:
        self.seen.append((key, [m.content for m in messages]))
        self.landed.setdefault(key, [m.content for m in messages])  # a keyed write appends once
        if self.lost_answers:
            self.lost_answers -= 1
            raise TimeoutError("deadline exceeded")


def test_a_send_whose_answer_was_lost_is_retried_with_the_same_key_and_messages_even_after_more_queue():
    server, failures = LandsThenTimesOut(lost_answers=2), []
    writer = Writer(server, background=False, on_failure=failures.append)
    writer.add("s", [NewMessage("alice", "one"), NewMessage("bot", "two")])
    assert not writer.flush(5)
    writer.add("s", [NewMessage("alice", "three")])
    assert not writer.flush(5)
    assert writer.flush(5) and writer.pending == 0
    first_key = server.seen[0][0]
    assert server.seen[:3] == [(first_key, ["one", "two"])] * 3  # the queued "three" waits its turn
    assert server.seen[3][0] != first_key and server.seen[3][1] == ["three"]
    assert [text for texts in server.landed.values() for text in texts] == ["one", "two", "three"]
    assert len(failures) == 2


def test_each_acknowledged_batch_gets_its_own_key():
    server = LandsThenTimesOut(lost_answers=0)
    writer = Writer(server, background=False, on_failure=lambda error: None)
    writer.add("s", [NewMessage("alice", "one")])
    writer.add("t", [NewMessage("alice", "two")])
    assert writer.flush(5)
    assert len({key for key, _ in server.seen}) == 2


class FailsFirst:
    """A server that answers the first send with `error` (appending nothing), then accepts every send."""

    def __init__(self, error: Exception) -> None:
        self.error: Exception | None = error
        self.seen: list[tuple[str, list[str]]] = []

    def __call__(self, session: str, messages: list[NewMessage], key: str) -> None:
        self.seen.append((key, [m.content for m in messages]))
        if self.error:
            error, self.error = self.error, None
            raise error


@pytest.mark.parametrize(
    "refusal",
    [
        InvalidArgument("messages[1].content is empty"),
        FailedPrecondition("session is closed"),
        PermissionDenied("the token may not write here"),
        NotFound("no such workspace"),
        Unauthenticated("token expired"),
    ],
)
def test_a_batch_refused_for_good_is_logged_and_dropped_and_the_next_batch_is_sent(refusal, caplog):
    server, failures = FailsFirst(refusal), []
    writer = Writer(server, background=False, on_failure=failures.append)
    writer.add("s", [NewMessage("alice", "hello"), NewMessage("bot", "")])
    with caplog.at_level(logging.ERROR, logger="peerlog_client.memory"):
        assert writer.flush(5) and writer.pending == 0
    writer.add("s", [NewMessage("alice", "next")])
    assert writer.flush(5) and writer.pending == 0
    assert [texts for _, texts in server.seen] == [["hello", ""], ["next"]]
    assert failures == [refusal]
    dropped = caplog.records[-1].getMessage()
    assert "dropped 2 message(s)" in dropped and "'hello'" in dropped and type(refusal).__name__ in dropped


@pytest.mark.parametrize(
    "transient", [Unavailable("connection refused"), DeadlineExceeded("deadline"), ResourceExhausted("slow down")]
)
def test_a_batch_that_failed_transiently_is_retried_with_the_same_key_before_later_batches(transient):
    server, failures = FailsFirst(transient), []
    writer = Writer(server, background=False, on_failure=failures.append)
    writer.add("s", [NewMessage("alice", "one")])
    assert not writer.flush(5) and writer.pending == 1
    writer.add("s", [NewMessage("alice", "two")])
    assert writer.flush(5) and writer.pending == 0
    (first_key, first), (retry_key, retried), (_, later) = server.seen
    assert (retry_key, retried) == (first_key, first) == (first_key, ["one"])
    assert later == ["two"] and failures == [transient]


@pytest.mark.parametrize(
    "unsendable",
    [UnicodeEncodeError("utf-8", "\ud83d", 0, 1, "surrogates not allowed"), TypeError("bad metadata value")],
)
def test_a_batch_that_cannot_be_built_into_a_request_is_dropped_not_retried_forever(unsendable, caplog):
    server, failures = FailsFirst(unsendable), []
    writer = Writer(server, background=False, on_failure=failures.append)
    writer.add("s", [NewMessage("alice", "cannot be encoded")])
    with caplog.at_level(logging.ERROR, logger="peerlog_client.memory"):
        assert writer.flush(5) and writer.pending == 0
    writer.add("s", [NewMessage("alice", "next")])
    assert writer.flush(5) and writer.pending == 0
    assert [texts for _, texts in server.seen] == [["cannot be encoded"], ["next"]]
    assert failures == [unsendable] and "dropped 1 message(s)" in caplog.records[-1].getMessage()


class FailsTimes:
    """A server that answers the first `n` sends with UNAVAILABLE (appending nothing), then accepts."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, []

    def __call__(self, session: str, messages: list[NewMessage], key: str) -> None:
        self.seen.append((key, [m.content for m in messages]))
        if len(self.seen) <= self.n:
            raise Unavailable("connection refused")


@pytest.mark.parametrize("background", [False, True])
def test_close_sends_what_is_queued_through_a_short_outage_instead_of_giving_up_at_the_first_failure(background):
    # with writeFrequency "session" close is the only send: one refused connection lost the whole session
    server = FailsTimes(3)
    writer = Writer(server, background=background, on_failure=lambda error: None)
    if background:
        writer._stop.set()  # the thread stays out of the way: close alone sends here
        writer._wake.set()
    writer.add("s", [NewMessage("alice", "one"), NewMessage("bot", "two")])
    assert writer.close(timeout=5) and writer.pending == 0
    assert len(server.seen) == 4 and len({key for key, _ in server.seen}) == 1


def test_close_gives_up_at_its_timeout_when_the_outage_lasts():
    server = FailsTimes(10_000)
    writer = Writer(server, background=False, on_failure=lambda error: None)
    writer.add("s", [NewMessage("alice", "one")])
    started = time.monotonic()
    assert not writer.close(timeout=0.5)
    assert 0.4 < time.monotonic() - started < 1.5 and writer.pending == 1
    assert 2 <= len(server.seen) <= 10  # tried again, paused between tries, not spun


def test_the_background_writer_waits_longer_after_each_failure_in_a_row(monkeypatch):
    pauses: list[float] = []
    server = FailsTimes(5)
    writer = Writer(server, background=False, on_failure=lambda error: None)
    monkeypatch.setattr(writer._stop, "wait", lambda pause: pauses.append(pause) or False)
    writer.add("s", [NewMessage("alice", "one")])
    thread = threading.Thread(target=writer._run, daemon=True)
    thread.start()
    eventually = time.monotonic() + 5
    while writer.pending and time.monotonic() < eventually:
        time.sleep(0.01)
    writer.close(timeout=1)
    thread.join(2)
    assert writer.pending == 0 and pauses == [0.5, 1.0, 2.0, 4.0, 8.0]
