"""Peerlog as an agent's memory: context injected before each turn, messages written after it, five
tools for the model, one MCP server. Needs the `memory` extra (pydantic): pip install 'peerlog-client[memory]'.

    from peerlog_client.memory import MemoryProvider, load_config

    with MemoryProvider(load_config()) as memory:
        system = memory.context_for_turn(user_text)
        ...
        memory.record_turn(user_text, answer)
"""

from peerlog_client.memory.config import ConfigError, MemoryConfig, load_config
from peerlog_client.memory.identity import Sender, session_name, user_peer
from peerlog_client.memory.provider import MemoryProvider, MemoryUnavailable, Stats
from peerlog_client.memory.tools import TOOL_NAMES, schemas

__all__ = [
    "ConfigError",
    "MemoryConfig",
    "MemoryProvider",
    "MemoryUnavailable",
    "Sender",
    "Stats",
    "TOOL_NAMES",
    "load_config",
    "schemas",
    "session_name",
    "user_peer",
]
