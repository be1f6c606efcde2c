"""Structured tool mode: a model that cannot call tools natively names one in a JSON turn, held to a schema
that allows a call of one offered tool (with that tool's own arguments) or the loop's way of ending; the
tools are described to it in the prompt (tool_catalogue)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, RootModel

from services.llm import formats


class ToolRequest(BaseModel):
    """A tool call as a structured-mode turn names it (the dreamer's specialists use it too)."""

    model_config = ConfigDict(extra="forbid")
    tool: str
    arguments: dict[str, Any] = {}


class _FinalReply(BaseModel):  # Chat's last structured turn: the answer and the ids it relies on
    model_config = ConfigDict(extra="forbid")
    # any JSON value; declared as a type list because llama-cpp-python's grammar compiler rejects a schema
    # without a type (and then silently enforces plain JSON instead of the whole turn's schema)
    answer: Any = Field(json_schema_extra={"type": ["string", "object", "array", "number", "boolean", "null"]})
    cited_ids: list[str] = []


class StructuredReply(RootModel[ToolRequest | _FinalReply]):
    """One turn in structured tool mode: a tool request or the final answer."""


class StructuredAnswer(RootModel[_FinalReply]):
    """The turn in structured tool mode after the tools are withdrawn: the final answer only."""


def structured_turn_schema(tools: list[dict[str, Any]] | None, free_text: bool) -> dict[str, Any]:
    """The JSON schema a structured-mode turn is held to: a call of one offered tool, or the final answer."""
    finish = _FinalReply.model_json_schema()
    if free_text:  # without a response schema the answer is text
        finish["properties"]["answer"] = {"type": "string"}
    return formats.tool_turn_schema(tools or [], finish)


class _Done(BaseModel):  # a dream specialist's last structured turn: it can make no more supported edits
    model_config = ConfigDict(extra="forbid")
    done: str


class StructuredStep(RootModel[ToolRequest | _Done]):
    """One specialist turn in structured tool mode: a tool call, or done."""


def step_schema(offered: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The JSON schema a structured-mode step is held to: a call of one offered tool, or done."""
    return formats.tool_turn_schema(offered or [], _Done.model_json_schema())


def tool_catalogue(specs: Sequence[dict[str, Any]]) -> str:
    """Function-tool specs as text, for a model that is told about tools in the prompt (structured mode).

    Each tool's arguments by name and meaning only: the turn's schema holds their exact form (enforced by
    the server, or added to the prompt where it cannot be), and small models lose the thread in raw schemas.
    """
    return "\n".join(
        f"- {s['function']['name']}: {s['function']['description']}{_arguments(s['function'])}" for s in specs
    )


def _arguments(function: Mapping[str, Any]) -> str:
    parameters = function["parameters"]
    required = set(parameters.get("required", ()))
    parts = [_argument(name, schema, name in required) for name, schema in parameters.get("properties", {}).items()]
    return f" Arguments: {'; '.join(parts)}." if parts else ""


def _argument(name: str, schema: Mapping[str, Any], required: bool) -> str:
    choices = schema.get("enum") or schema.get("items", {}).get("enum")
    notes = [
        schema.get("description", ""),
        f"one of {', '.join(map(str, choices))}" if choices else "",
        "" if required else "optional",
    ]
    return f"{name} ({', '.join(n for n in notes if n)})" if any(notes) else name
