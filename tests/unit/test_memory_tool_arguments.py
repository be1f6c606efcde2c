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
