#!/usr/bin/env python
"""A complete agent loop with peerlog as its memory: the provider injects context before each turn, the
model may call the five memory tools, and the turn is written back afterwards.

    PEERLOG_TARGET=localhost:50051 PEERLOG_TOKEN=... \\
    .venv/bin/python examples/agent.py --base-url http://127.0.0.1:8080/v1 --model qwen "Where should I eat?"

Any OpenAI-compatible endpoint works (--base-url, --model; OPENAI_API_KEY if it needs one); by default the
local model `make demo` serves (PEERLOG_LLM_BASE_URL / PEERLOG_LLM_MODEL). Memory settings come from
peerlog-memory's files and environment (see `peerlog-memory status`). Without messages on the command
line it reads them from stdin, one per line.

Servers differ in tool calling. Where the server returns native `tool_calls`, they are used. Small local
models often write the call as JSON in the text instead ({"name": ..., "arguments": {...}}, maybe in a
```json fence); such a reply is checked against the offered tools and run the same way. A JSON
{"answer": ...} is the final answer; any other text is the answer as it stands.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from openai import OpenAI
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from peerlog_client.memory import MemoryProvider, load_config

SYSTEM = (
    "You are a helpful assistant with a long-term memory of the people you talk to. "
    "Use the peerlog tools to look up what you need to know about the user."
)
TOOL_ROUNDS = 3
FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


class TextToolCall(BaseModel):
    """A tool call written as JSON in the reply's text."""

    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] = {}

    @field_validator("arguments", mode="before")
    @classmethod
    def _decoded(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value  # some models send a JSON string


class TextAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    answer: str


@dataclass(frozen=True)
class Call:
    """A tool call to run: native ones have the server's id, ones read from text have none."""

    name: str
    arguments: str
    id: str | None = None


@dataclass
class Turn:
    """What happened in one turn: the injected memory, the tool calls (name, arguments, result), the answer."""

    injected: str
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)
    answer: str = ""


def _first_json_object(text: str) -> Any:
    fenced = FENCE.search(text)
    text = fenced.group(1) if fenced else text
    start = text.find("{")
    if start < 0:
        return None
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0]
    except json.JSONDecodeError:
        return None


def parse_text_reply(content: str | None, tool_names: list[str]) -> Call | str:
    """A reply's text as a tool call (JSON naming one of `tool_names`, in a fence or not) or as the answer
    (a JSON {"answer": ...}, or else the text itself)."""
    text = (content or "").strip()
    found = _first_json_object(text)
    if not isinstance(found, dict):
        return text
    try:
        call = TextToolCall.model_validate(found)
    except ValidationError:  # a bad JSON string in arguments is one too
        try:
            return TextAnswer.model_validate(found).answer
        except ValidationError:
            return text
    return Call(call.name, json.dumps(call.arguments)) if call.name in tool_names else text


def calls_in(reply: Any, tool_names: list[str]) -> list[Call] | str:
    """The tool calls a reply asks for, native or written as text; else its answer."""
    if reply.tool_calls:
        return [Call(c.function.name, c.function.arguments, c.id) for c in reply.tool_calls]
    parsed = parse_text_reply(reply.content, tool_names)
    return [parsed] if isinstance(parsed, Call) else parsed


def results_as_messages(calls: list[Call], results: list[str], content: str | None) -> list[dict[str, Any]]:
    """What to append for the model's next round: native calls as an assistant message with tool_calls
    plus one tool message each; a call read from text as the model's text plus a user message with the
    result (a server without native tools may not render tool messages). Never content None: some
    servers answer HTTP 500 to it."""
    if calls[0].id is None:
        call, result = calls[0], results[0]
        return [
            {"role": "assistant", "content": content or ""},
            {
                "role": "user",
                "content": f"{call.name} returned:\n{result}\n\nUsing this, answer my last message in plain words.",
            },
        ]
    assistant = {
        "role": "assistant",
        "content": content or "",
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
        ],
    }
    return [assistant, *({"role": "tool", "tool_call_id": c.id, "content": r} for c, r in zip(calls, results))]


def run_turn(
    memory: MemoryProvider,
    model: OpenAI,
    model_name: str,
    history: list[dict[str, Any]],
    user_text: str,
    tool_rounds: int = TOOL_ROUNDS,
) -> Turn:
    """One turn: memory into the system prompt, the model with the memory tools (at most `tool_rounds`
    rounds of calls), the answer recorded in `history` and written to peerlog."""
    turn = Turn(injected=memory.context_for_turn(user_text))
    system = f"{SYSTEM}\n\n{turn.injected}" if turn.injected else SYSTEM
    messages = [{"role": "system", "content": system}, *history, {"role": "user", "content": user_text}]
    tools = memory.tools("openai")
    for round_ in range(tool_rounds + 1):
        offered = tools if round_ < tool_rounds else []  # the last round must answer
        reply = (
            model.chat.completions.create(
                model=model_name, messages=messages, **({"tools": offered} if offered else {})
            )
            .choices[0]
            .message
        )
        calls = calls_in(reply, [t["function"]["name"] for t in offered])
        if isinstance(calls, str):
            turn.answer = calls
            break
        results = [memory.dispatch(c.name, c.arguments) for c in calls]
        turn.tool_calls += [(c.name, c.arguments, r) for c, r in zip(calls, results)]
        messages += results_as_messages(calls, results, reply.content)
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
    print(f"> assistant: {turn.answer}", file=out, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("messages", nargs="*", help="the user's messages, one turn each")
    parser.add_argument("--base-url", default=os.environ.get("PEERLOG_LLM_BASE_URL", "http://127.0.0.1:8080/v1"))
    parser.add_argument("--model", default=os.environ.get("PEERLOG_LLM_MODEL", "local"))
    parser.add_argument("--session", help="a fixed peerlog session (default: the configured session strategy)")
    parser.add_argument("--tool-rounds", type=int, default=TOOL_ROUNDS, help="rounds of tool calls per turn")
    args = parser.parse_args(argv)
    model = OpenAI(base_url=args.base_url, api_key=os.environ.get("OPENAI_API_KEY", "not-needed"))
    history: list[dict[str, Any]] = []
    with MemoryProvider(load_config(), session=args.session) as memory:
        for text in args.messages or (line.strip() for line in sys.stdin if line.strip()):
            show(run_turn(memory, model, args.model, history, text, args.tool_rounds), text)
        print(f"\n(memory: {json.dumps({'failed_open': dict(memory.stats.failures)})})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
