"""The memory provider's writer: what a transient failure leaves is retried as the same write; what the
server refuses for good is dropped, so it cannot hold back the batches queued after it."""

import logging

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
