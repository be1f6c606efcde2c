"""How a tool call's arguments arrive: a tool without arguments is often called with "" (or null), which
means no arguments, not a JSON error."""

from __future__ import annotations

import json
from unittest.mock import MagicMock

import pytest

from peerlog_client.memory.config import validate
from peerlog_client.memory.provider import MemoryProvider


@pytest.fixture
def provider(tmp_path):
    client = MagicMock()
    client.workspace.return_value.peer.return_value.card.return_value.entries = ["ATTRIBUTE: keeps bees"]
    provider = MemoryProvider(
        validate([("test", {"peerName": "alice", "recallMode": "tools"})]), directory=tmp_path, client=client
    )
    yield provider
    provider.close()


@pytest.mark.parametrize("args", ["", "  ", "null", "{}", None, {}])
def test_a_tool_without_arguments_called_with_an_empty_string_or_null_runs_with_its_defaults(provider, args):
    assert json.loads(provider.dispatch("peerlog_profile", args)) == {
        "peer": "alice",
        "card": ["ATTRIBUTE: keeps bees"],
    }


def test_arguments_that_are_not_json_are_still_refused(provider):
    assert provider.dispatch("peerlog_profile", "{peer").startswith("error:")


def test_a_search_of_long_messages_answers_excerpts_that_fit_the_models_context(provider):
    from datetime import UTC, datetime

    from peerlog_client.memory.tools import EXCERPT_CHARS, RESULT_CHARS

    def hit(i: int) -> MagicMock:
        message = MagicMock(session_id="s", peer_id="alice", author_name=None, created_at=datetime.now(UTC))
        message.content = f"{i} " + "bees " * 5_000  # 25,000 characters: the most a message holds
        return MagicMock(message=message, score=1.0 - i / 100)

    provider.client.workspace.return_value.search.return_value = [hit(i) for i in range(50)]
    result = provider.dispatch("peerlog_search", {"query": "bees", "limit": 50})
    found = json.loads(result)
    assert len(result) < RESULT_CHARS + 4_000  # was 1,254,000 characters
    assert [h["content"].split()[0] for h in found] == [str(i) for i in range(len(found))]  # the best first
    assert len(found) >= 5 and all(len(h["content"]) < EXCERPT_CHARS + 40 for h in found)
    assert found[0]["content"].endswith(f"[{25_002 - EXCERPT_CHARS} more characters]")
