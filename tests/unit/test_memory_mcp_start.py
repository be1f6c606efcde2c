"""The MCP server runs the provider in tools mode: an MCP client never reads injected context, so its start
must not pay for the prewarm (base layer and Chat passes) that hybrid and context modes make."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest

from peerlog_client.memory import mcp_server
from peerlog_client.memory.config import validate
from peerlog_client.memory.provider import MemoryProvider


def started_mcp_server(monkeypatch, tmp_path, keys: dict) -> tuple[MemoryProvider, MagicMock]:
    """Run mcp_server.serve with a fake client and no stdio; the provider as it was when serving began."""
    client, served = MagicMock(), []

    def provider(config, directory=None):
        return MemoryProvider(config, directory=directory, client=client)

    async def serve_stdio(provider: MemoryProvider) -> None:
        provider.wait_prewarm(5)  # a prewarm, were there one, gets the time to make its calls
        served.append(provider)

    monkeypatch.setattr(mcp_server, "MemoryProvider", provider)
    monkeypatch.setattr(mcp_server, "serve_stdio", serve_stdio)
    mcp_server.serve(validate([("test", keys)]), directory=tmp_path)
    return served[0], client


def chat_calls(client: MagicMock) -> list:
    return [c for c in client.mock_calls if c[0].endswith(".chat")]


@pytest.mark.parametrize("mode", ["hybrid", "context", "tools"])
def test_starting_the_mcp_server_makes_no_chat_call_whatever_the_recall_mode(monkeypatch, tmp_path, mode):
    provider, client = started_mcp_server(monkeypatch, tmp_path, {"recallMode": mode})
    assert provider.config.recall_mode == "tools"
    assert chat_calls(client) == []
    assert not client.workspace.called  # nothing read or created until a tool is called


def test_init_on_session_start_still_readies_the_session_and_nothing_more(monkeypatch, tmp_path):
    provider, client = started_mcp_server(monkeypatch, tmp_path, {"initOnSessionStart": True})
    assert provider.config.init_on_session_start
    assert client.workspace.return_value.session.called
    assert chat_calls(client) == []


def test_peerlog_mcp_with_a_bad_setting_says_so_in_one_line_and_exits_2(monkeypatch, tmp_path):
    # an MCP client shows a traceback as "the server failed to start"
    from typer.testing import CliRunner

    from services.cli.main import app

    monkeypatch.setenv("PEERLOG_MEMORY_GLOBAL", str(tmp_path / "none.json"))
    monkeypatch.setenv("PEERLOG_MEMORY_HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["mcp"], env={"PEERLOG_TIMEOUT": "abc"})
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.startswith("peerlog mcp: ") and "timeout" in result.output and result.output.count("\n") <= 3
