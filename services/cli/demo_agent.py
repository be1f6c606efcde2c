"""The demo's last step: two turns of examples/agent.py, as alice in the scripted session, with the model the
demo uses: peerlog's memory injected into the prompt, a memory tool call, the answer, the turn written back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

AGENT = Path(__file__).resolve().parents[2] / "examples" / "agent.py"
# each asks for something only the memory knows, so the model has a reason to call a tool
TURNS = [
    "Search your memory: what did I tell you about my sister? Suggest one sight for the two of us.",
    "Search your memory for what I eat, then suggest where we could have dinner.",
]


def agent_env(root: Path, port: int, token: str, workspace: str, model_env: dict[str, str]) -> dict[str, str]:
    """The agent's settings: alice and the assistant of the demo workspace; the demo's own settings files
    (never the user's ~/.peerlog); a timeout that fits a 0.5B model's Chat on two cores."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PEERLOG_MEMORY_")}
    return {
        **env,
        **model_env,
        "PEERLOG_TARGET": f"127.0.0.1:{port}",
        "PEERLOG_TOKEN": token,
        "PEERLOG_WORKSPACE": workspace,
        "PEERLOG_TIMEOUT": "300",
        "PEERLOG_MEMORY_GLOBAL": str(root / "memory-global.json"),
        "PEERLOG_MEMORY_HOME": str(root / "memory"),
        "PEERLOG_MEMORY_PEER_NAME": "alice",
        "PEERLOG_MEMORY_AI_PEER": "assistant",
        "PEERLOG_MEMORY_WRITE_FREQUENCY": "turn",
        "PEERLOG_MEMORY_CONTEXT_TOKENS": "600",
        "PEERLOG_MEMORY_DIALECTIC_REASONING_LEVEL": "minimal",
    }


def run_agent_turns(env: dict[str, str], session: str, say) -> int:
    """Run the two turns (the agent prints each); its exit code."""
    say(
        f"\nTwo turns of examples/agent.py as alice in {session!r} ({env.get('PEERLOG_LLM_MODEL', 'local')} at "
        f"{env.get('PEERLOG_LLM_BASE_URL')}): memory injected, a tool call, the answer, the turn written back."
    )
    done = subprocess.run(
        [sys.executable, str(AGENT), "--session", session, "--tool-rounds", "1", *TURNS], env=env, check=False
    )
    return done.returncode
