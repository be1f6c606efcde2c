"""A turn side with no text is not written, a NUL is left out and a lone surrogate becomes U+FFFD: the server
refuses blank content or a NUL, and a refused message would take the rest of its batch, and before the fix
every later turn, with it; a lone surrogate cannot even be encoded into the request."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest

from peerlog_client._sync import _new_message
from peerlog_client.errors import InvalidArgument
from peerlog_client.memory.config import validate
from peerlog_client.memory.provider import MemoryProvider
from peerlog_client.models import NewMessage


class StrictServer:
    """AddMessages as the client builds it and the server checks it: the request is encoded (a lone
    surrogate raises there), and blank content or a NUL is INVALID_ARGUMENT."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []

    def add_messages(self, messages: list[NewMessage], idempotency_key: str = "") -> None:
        for m in messages:
            _new_message(m).SerializeToString()
        for i, m in enumerate(messages):
            if not m.content.strip():
                raise InvalidArgument(f"messages[{i}].content is empty")
            if "\x00" in m.content:
                raise InvalidArgument(f"messages[{i}].content contains a NUL character (U+0000)")
        self.sent.append([m.content for m in messages])


@pytest.fixture
def provider_and_server(tmp_path):
    server, client = StrictServer(), MagicMock()
    client.workspace.return_value.session.return_value.add_messages.side_effect = server.add_messages
    config = validate([("test", {"writeFrequency": "turn", "messageMaxChars": 10})])
    provider = MemoryProvider(config, directory=tmp_path, client=client)
    yield provider, server
    provider.close()


@pytest.mark.parametrize("blank", ["", "   ", "\n\t "])
def test_a_blank_side_of_a_turn_sends_nothing_and_blocks_nothing(provider_and_server, blank):
    provider, server = provider_and_server
    provider.record_turn("hello", blank)
    provider.record_turn(blank, blank)
    provider.record_turn("q", "a")
    assert server.sent == [["hello"], ["q", "a"]]
    assert provider.writer.pending == 0 and not provider.stats.failures


def test_whitespace_only_chunks_of_a_long_message_are_left_out(provider_and_server):
    provider, server = provider_and_server
    provider.record_turn("hi" + " " * 30, "ok")
    assert server.sent == [["hi" + " " * 8, "ok"]]
    assert provider.writer.pending == 0


def test_a_nul_in_one_turn_is_left_out_and_the_other_turns_of_its_batch_are_written(tmp_path):
    server, client = StrictServer(), MagicMock()
    client.workspace.return_value.session.return_value.add_messages.side_effect = server.add_messages
    provider = MemoryProvider(validate([("test", {"writeFrequency": "session"})]), directory=tmp_path, client=client)
    provider.record_turn("turn one", "answer one")
    provider.record_turn("binary paste \x00 here", "\x00")
    provider.record_turn("turn three", "answer three")
    provider.close()
    assert server.sent == [["turn one", "answer one", "binary paste  here", "turn three", "answer three"]]
    assert provider.writer.pending == 0 and not provider.stats.failures


def test_a_lone_surrogate_in_one_turn_is_stored_as_a_replacement_character_and_later_turns_go_out(
    provider_and_server,
):
    provider, server = provider_and_server
    provider.record_turn("cut mid-\ud83d", "ok")  # pasted text cut between the two halves of an emoji
    provider.record_turn("whole \ud83d\ude00", "ok")  # a pair that came in as two halves joins back
    provider.record_turn("later", "ok")
    assert server.sent == [["cut mid-\ufffd", "ok"], ["whole \U0001f600", "ok"], ["later", "ok"]]
    assert provider.writer.pending == 0 and not provider.stats.failures
