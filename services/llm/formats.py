"""Pure helpers for structured output: request shapes, reply parsing and the repair prompt."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from openai.lib._pydantic import to_strict_json_schema  # the SDK's own strict transform, as .parse() uses
from pydantic import BaseModel, ValidationError

from services.llm.settings import SchemaMode

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\r?\n?(.*?)```", re.DOTALL)
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_ERROR_CHARS = 2000

M = TypeVar("M", bound=BaseModel)


def schema_name(schema: type[BaseModel], name: str | None = None) -> str:
    """A response-format name OpenAI accepts (`^[A-Za-z0-9_-]{1,64}$`)."""
    return _NAME_UNSAFE.sub("_", name or schema.__name__)[:64] or "response"


def response_format(mode: SchemaMode, schema: type[BaseModel], name: str) -> dict[str, Any]:
    """The `response_format` request field for `mode`."""
    if mode == "json_schema":
        # strict mode needs every property required and no extra keys; pydantic still validates the reply
        strict = to_strict_json_schema(schema)
        return {"type": "json_schema", "json_schema": {"name": name, "schema": strict, "strict": True}}
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": schema.model_json_schema()}
    return {"type": "json_object"}


def schema_instruction(schema: type[BaseModel]) -> str:
    """The prompt text that describes the schema when the server cannot enforce it."""
    return (
        "Reply with one JSON object only, no prose and no code fences. "
        f"It must match this JSON schema:\n{json.dumps(schema.model_json_schema(), separators=(',', ':'))}"
    )


def with_instruction(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The messages with `text` added to the leading system message (or as a new one)."""
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{text}"}
        return [first, *messages[1:]]
    # some chat templates accept a system message only at the start
    return [{"role": "system", "content": text}, *messages]


def normalise_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of the messages that local servers accept: an assistant's `content: None` becomes ""."""
    out = []
    for message in messages:
        message = dict(message)
        if message.get("role") == "assistant" and message.get("content") is None:
            message["content"] = ""
        out.append(message)
    return out


def strip_fences(text: str) -> str:
    """The JSON inside a ```json fence, if the reply has one; else the reply trimmed."""
    match = _FENCE.search(text)
    return (match.group(1) if match else text).strip()


def parse_reply(text: str, schema: type[M]) -> M:
    """The reply validated as `schema`; raises pydantic.ValidationError (bad JSON included)."""
    return schema.model_validate_json(strip_fences(text))


def describe_error(error: ValidationError) -> str:
    """A short, model-readable list of what was wrong: one `location: message` per line."""
    lines = []
    for item in error.errors(include_url=False, include_input=False):
        location = ".".join(str(part) for part in item["loc"]) or "(root)"
        lines.append(f"- {location}: {item['msg']}")
    return "\n".join(lines)[:_MAX_ERROR_CHARS]


def repair_messages(messages: list[dict[str, Any]], bad_reply: str, error: str) -> list[dict[str, Any]]:
    """The conversation extended with the invalid reply and a request to correct it."""
    request = (
        "Your reply was not valid JSON for the required schema:\n"
        f"{error}\n"
        "Reply again with only the corrected JSON object, nothing else."
    )
    return [*messages, {"role": "assistant", "content": bad_reply}, {"role": "user", "content": request}]
