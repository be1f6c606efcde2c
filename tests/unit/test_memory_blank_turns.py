"""A turn side with no text is not written: the server refuses blank content, and a refused message would
take the rest of its batch, and before the fix every later turn, with it."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest

from peerlog_client.errors import InvalidArgument
from peerlog_client.memory.config import validate
from peerlog_client.memory.provider import MemoryProvider
from peerlog_client.models import NewMessage


class StrictServer:
    """AddMessages as the server checks it: blank content is INVALID_ARGUMENT."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []

    def add_messages(self, messages: list[NewMessage], idempotency_key: str = "") -> None:
        for i, m in enumerate(messages):
            if not m.content.strip():
                raise InvalidArgument(f"messages[{i}].content is empty")
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
