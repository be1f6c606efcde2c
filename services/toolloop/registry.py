"""A tool is declared once: its pydantic input model gives the JSON schema, and one registry maps its name
to that model and its handler. A bad name or bad arguments become an error result the model can correct."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from services.llm.client import ToolCall

Kind = Literal["observation", "message"]  # what an id the model was shown names
Env = TypeVar("Env")


@dataclass(frozen=True)
class ToolResult:
    """What the model is shown, the ids in it, and how many rows it found."""

    text: str
    shown: Mapping[str, Kind]
    hits: int


class ToolArgs(BaseModel):  # a tool's input (no docstring: a subclass's is its description); unknown arguments refused
    # strict: a count is an integer, not true, 5.0 or "5" (a time field loosens it for ISO 8601 text alone)
    model_config = ConfigDict(extra="forbid", strict=True)


def function_spec(name: str, args: type[BaseModel]) -> dict[str, Any]:
    """An OpenAI function-tool spec: the description and parameters come from the input model."""
    return {
        "type": "function",
        "function": {"name": name, "description": (args.__doc__ or "").strip(), "parameters": args.model_json_schema()},
    }


@dataclass(frozen=True)
class Tool(Generic[Env]):
    name: str
    args: type[ToolArgs]
    run: Callable[[Env, Any], Awaitable[ToolResult]]

    def spec(self) -> dict[str, Any]:
        return function_spec(self.name, self.args)


def parse_arguments(raw: str | Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments as a dict ({} for empty text); ValueError when they are not a JSON object, nest
    too deeply to parse, or hold text no store takes: a NUL (Postgres cannot store or compare one) or a lone
    surrogate, from an escape such as "\\ud800" (not UTF-8: Kafka's serialiser and protobuf refuse it)."""
    try:
        value = raw if isinstance(raw, Mapping) else json.loads(raw or "{}")
        problem = _unstorable(value)
    except RecursionError:
        raise ValueError("arguments nest too deeply") from None
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    if problem:
        raise ValueError(f"arguments must not contain {problem}")
    return value


def _unstorable(value: Any) -> str | None:
    """What in `value`'s texts no store takes, or None."""
    if isinstance(value, str):
        return _unstorable_text(value)
    if isinstance(value, Mapping):
        items: list[Any] = [part for item in value.items() for part in item]
    elif isinstance(value, list):
        items = value
    else:
        return None
    return next((problem for problem in map(_unstorable, items) if problem), None)


def _unstorable_text(text: str) -> str | None:
    if "\x00" in text:
        return "the NUL character (\\u0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone surrogate (an unpaired \\ud800-\\udfff escape)"
    return None


def bad_arguments(name: str, error: Exception) -> str:
    """What the model is told when a call's arguments do not parse or validate."""
    return f"error: bad arguments for {name}: {error}"[:1000]


async def run_call(tools: Mapping[str, Tool[Env]], env: Env, call: ToolCall, allowed: Sequence[str]) -> ToolResult:
    """Run one call of a tool in `tools` named in `allowed`; a bad name or bad arguments become an error result."""
    tool = tools.get(call.name) if call.name in allowed else None
    if tool is None:
        return ToolResult(f"error: no tool {call.name!r}; available: {', '.join(allowed)}", {}, 0)
    try:
        args = tool.args.model_validate(parse_arguments(call.arguments))
    except (ValueError, ValidationError) as error:
        return ToolResult(bad_arguments(call.name, error), {}, 0)
    return await tool.run(env, args)
