#!/usr/bin/env python
"""A complete agent loop with peerlog as its memory: the provider injects context before each turn, the
model may call the five memory tools, and the turn is written back afterwards.

    PEERLOG_TARGET=localhost:50051 PEERLOG_TOKEN=... \\
    .venv/bin/python examples/agent.py --base-url http://127.0.0.1:8080/v1 --model qwen "Where should I eat?"

Any OpenAI-compatible endpoint works (--base-url, --model; OPENAI_API_KEY if it needs one); by default the
one `make demo` runs locally (PEERLOG_LLM_BASE_URL / PEERLOG_LLM_MODEL). Memory settings come from
peerlog-memory's files and environment (see `peerlog-memory status`). Without messages on the command
line it reads them from stdin, one per line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from openai import OpenAI

from peerlog_client.memory import MemoryProvider, load_config

SYSTEM = "You are a helpful assistant with a long-term memory of the people you talk to."
MAX_TOOL_ROUNDS = 3


@dataclass
class Turn:
    """What happened in one turn: the injected memory, the tool calls (name, arguments, result), the answer."""

    injected: str
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)
    answer: str = ""


def run_turn(memory: MemoryProvider, model: OpenAI, model_name: str, history: list[dict[str, Any]],
             user_text: str) -> Turn:
    """One turn: memory into the system prompt, the model with the memory tools (at most MAX_TOOL_ROUNDS
    rounds of calls), the answer recorded in `history` and written to peerlog."""
    turn = Turn(injected=memory.context_for_turn(user_text))
    system = f"{SYSTEM}\n\n{turn.injected}" if turn.injected else SYSTEM
    messages = [{"role": "system", "content": system}, *history, {"role": "user", "content": user_text}]
    tools = memory.tools("openai")
    for _ in range(MAX_TOOL_ROUNDS + 1):
        reply = model.chat.completions.create(model=model_name, messages=messages,
                                              **({"tools": tools} if tools else {})).choices[0].message
        if not reply.tool_calls:
            turn.answer = reply.content or ""
            break
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            result = memory.dispatch(call.function.name, call.function.arguments)
            turn.tool_calls.append((call.function.name, call.function.arguments, result))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        tools = tools if len(turn.tool_calls) < MAX_TOOL_ROUNDS else []  # the last round must answer
    history += [{"role": "user", "content": user_text}, {"role": "assistant", "content": turn.answer}]
    memory.record_turn(user_text, turn.answer)
    return turn


def show(turn: Turn, user_text: str, out=sys.stdout) -> None:
    print(f"\n> user: {user_text}", file=out)
    print("  [memory injected into the system prompt]", file=out)
    for line in (turn.injected or "(nothing yet)").splitlines():
        print(f"    {line}", file=out)
    for name, arguments, result in turn.tool_calls:
        print(f"  [tool call] {name}({arguments})\n    -> {result[:400]}", file=out)
    print(f"> assistant: {turn.answer}", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("messages", nargs="*", help="the user's messages, one turn each")
    parser.add_argument("--base-url", default=os.environ.get("PEERLOG_LLM_BASE_URL", "http://127.0.0.1:8080/v1"))
    parser.add_argument("--model", default=os.environ.get("PEERLOG_LLM_MODEL", "local"))
    args = parser.parse_args(argv)
    model = OpenAI(base_url=args.base_url, api_key=os.environ.get("OPENAI_API_KEY", "not-needed"))
    history: list[dict[str, Any]] = []
    with MemoryProvider(load_config()) as memory:
        for text in args.messages or (line.strip() for line in sys.stdin if line.strip()):
            show(run_turn(memory, model, args.model, history, text), text)
        print(f"\n(memory: {json.dumps({'failed_open': dict(memory.stats.failures)})})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
