"""The memory provider's writer: what a failed send leaves is retried as the same write."""

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
