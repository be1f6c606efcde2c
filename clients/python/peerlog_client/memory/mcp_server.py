"""The five memory tools over MCP (stdio), with the official SDK: `peerlog mcp` or `peerlog-memory mcp`.

Configured by the same settings as the provider (load_config: files, host blocks, environment). An MCP
client has no turns to inject into, so the provider runs in tools mode whatever recallMode says: its start
prewarms nothing (with initOnSessionStart it only readies the session).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from peerlog_client.memory.config import MemoryConfig, load_config
from peerlog_client.memory.provider import MemoryProvider
from peerlog_client.memory.tools import TOOLS, input_schema

NAME = "peerlog-memory"


def build_server(provider: MemoryProvider) -> Server[Any]:
    """An MCP server whose tools are the provider's five, run through its dispatch."""
    tools = [
        types.Tool(name=t.name, description=t.description, input_schema=input_schema(t, provider.config))
        for t in TOOLS.values()
    ]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        # dispatch is sync (the sync client) and bounded by the provider's timeout: run it off the loop
        text = await anyio.to_thread.run_sync(provider.dispatch, params.name, params.arguments or {})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=text.startswith("error:")
        )

    return Server(NAME, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(provider: MemoryProvider) -> None:
    server = build_server(provider)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve(config: MemoryConfig | None = None, directory: Path | None = None) -> None:
    """Serve the tools on stdin/stdout until the client closes them."""
    # tools mode: a hybrid or context start would prewarm injected context (Chat passes) no MCP client reads
    config = (config or load_config()).model_copy(update={"recall_mode": "tools"})
    with MemoryProvider(config, directory=directory) as provider:
        anyio.run(serve_stdio, provider)
