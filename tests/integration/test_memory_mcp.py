"""`peerlog mcp` in its own process, driven over stdio by the official MCP SDK's own client, against the
real stack: the five tools are listed with their schemas and a call reaches the server and back."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, stdio_client

from peerlog_client import Peerlog
from tests.integration.test_client_library import admin_token, api  # noqa: F401 - api: the fixture
from tests.support.model_server import Reply

ROOT = Path(__file__).resolve().parents[2]


async def test_the_mcp_server_lists_the_five_tools_and_runs_them_against_peerlog(
    api,
    settings,
    model_server,  # noqa: F811
    tmp_path,
):
    model_server.reply_with(lambda request: Reply(content="Alice keeps bees."))
    env = {
        **os.environ,
        "PEERLOG_TARGET": api.address,
        "PEERLOG_TOKEN": admin_token(settings) or "",
        "PEERLOG_WORKSPACE": "acme",
        "PEERLOG_MEMORY_HOME": str(tmp_path),
        "PEERLOG_MEMORY_GLOBAL": str(tmp_path / "none.json"),
        "PEERLOG_MEMORY_PEER_NAME": "alice",
        "PEERLOG_MEMORY_AI_PEER": "bot",
        "PEERLOG_MEMORY_SESSION_STRATEGY": "global",
    }
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "services.cli.main", "mcp"], env=env, cwd=str(ROOT)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = (await session.list_tools()).tools
        assert [t.name for t in listed] == [
            "peerlog_profile",
            "peerlog_search",
            "peerlog_context",
            "peerlog_reasoning",
            "peerlog_conclude",
        ]
        assert "reasoning_level" in listed[3].input_schema["properties"]

        created = await session.call_tool("peerlog_conclude", {"conclusion": "Alice keeps bees"})
        assert not created.is_error
        observation_id = json.loads(created.content[0].text)["created"][0]
        card = await session.call_tool("peerlog_profile", {"card": ["ATTRIBUTE: keeps bees"]})
        assert json.loads(card.content[0].text)["card"] == ["ATTRIBUTE: keeps bees"]
        context = json.loads((await session.call_tool("peerlog_context", {})).content[0].text)
        assert context["card"] == ["ATTRIBUTE: keeps bees"]
        answer = await session.call_tool("peerlog_reasoning", {"query": "What does Alice keep?"})
        assert json.loads(answer.content[0].text)["answer"] == "Alice keeps bees."
        bad = await session.call_tool("peerlog_conclude", {"conclusion": "x", "delete_id": "y"})
        assert bad.is_error and "exactly one" in bad.content[0].text

    with Peerlog(api.address, token=admin_token(settings)) as client:
        observation = client.workspace("acme").observation(observation_id)
    assert (observation.observer_id, observation.observed_id, observation.content) == (
        "bot",
        "alice",
        "Alice keeps bees",
    )
