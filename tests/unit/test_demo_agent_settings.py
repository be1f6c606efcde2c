"""The demo's agent turns run with memory settings the provider accepts: alice and the assistant of the demo
workspace, the demo's own settings files, the model endpoint the demo uses."""

from __future__ import annotations

from pathlib import Path

from peerlog_client.memory import load_config
from services.cli.demo_agent import AGENT, TURNS, agent_env


def test_the_demo_agent_settings_load_and_name_the_demo_peers(tmp_path, monkeypatch):
    monkeypatch.setenv("PEERLOG_MEMORY_RECALL_MODE", "context")  # the user's own settings stay out
    env = agent_env(tmp_path, 50123, "tok", "demo", {"PEERLOG_LLM_BASE_URL": "http://127.0.0.1:9/v1"})
    config = load_config(env)
    assert (config.resolved_target, config.resolved_token, config.resolved_workspace) == (
        "127.0.0.1:50123",
        "tok",
        "demo",
    )
    assert (config.peer_name, config.ai_peer, config.recall_mode) == ("alice", "assistant", "hybrid")
    assert config.write_frequency == "turn" and config.timeout == 300
    assert Path(env["PEERLOG_MEMORY_GLOBAL"]).parent == tmp_path  # never the user's ~/.peerlog
    assert env["PEERLOG_LLM_BASE_URL"] == "http://127.0.0.1:9/v1"
    assert AGENT.is_file() and all(len(t) < 120 for t in TURNS)  # under the level heuristic's first step
