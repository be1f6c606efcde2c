"""Pure helpers for structured output: request shapes, reply parsing and the repair prompt."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

# the SDK's own strict transform (what .parse() applies to a model), used here on a schema we built
from openai.lib._pydantic import _ensure_strict_json_schema
from pydantic import BaseModel, ValidationError

from services.llm.settings import SchemaMode

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\r?\n?(.*?)```", re.DOTALL)
# a fence on lines of its own: its body may hold ``` of its own (a command quoted inside a string)
_LINE_FENCE = re.compile(r"^[ \t]*```[A-Za-z0-9_-]*[ \t]*\r?\n(.*?)\r?\n[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_ERROR_CHARS = 2000
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str only from an escape such as "\\ud800" without its pair

M = TypeVar("M", bound=BaseModel)


def schema_name(schema: type[BaseModel], name: str | None = None) -> str:
    """A response-format name OpenAI accepts (`^[A-Za-z0-9_-]{1,64}$`)."""
    return _NAME_UNSAFE.sub("_", name or schema.__name__)[:64] or "response"


def response_format(mode: SchemaMode, schema: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The `response_format` request field for `mode`, asking for replies that match the JSON `schema`."""
    if mode == "json_schema":
        # strict mode needs every property required and no extra keys; pydantic still validates the reply
        strict = copy.deepcopy(dict(schema))
        strict = _ensure_strict_json_schema(strict, path=(), root=strict)
        return {"type": "json_schema", "json_schema": {"name": name, "schema": strict, "strict": True}}
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": _within_grammar_limits(schema)}
    return {"type": "json_object"}


# llama.cpp's grammar parser refuses a string bound that expands past its repetition limit (measured with
# llama-cpp-python 0.3.36: maxLength 1000 parses, 2000 does not), and that server then dies mid-request
_GRAMMAR_MAX_LENGTH = 500


def _within_grammar_limits(schema: Any) -> Any:
    """A copy of `schema` without string length bounds a grammar cannot hold; pydantic still checks them."""
    if isinstance(schema, list):
        return [_within_grammar_limits(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {key: _within_grammar_limits(value) for key, value in schema.items()}
    if isinstance(out.get("maxLength"), int) and out["maxLength"] > _GRAMMAR_MAX_LENGTH:
        del out["maxLength"]
    return out


def schema_instruction(schema: Mapping[str, Any]) -> str:
    """The prompt text that describes the JSON `schema` when the server cannot enforce it."""
    return (
        "Reply with one JSON object only, no prose and no code fences. "
        f"It must match this JSON schema:\n{json.dumps(schema, separators=(',', ':'))}"
    )


def tool_turn_schema(specs: Sequence[Mapping[str, Any]], finish: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON schema of one structured-mode turn: a call of one of the function-tool `specs`, or `finish`.

    A call is `{"tool": <name>, "arguments": <that tool's parameters>}` with the name as a const, one
    alternative per tool, so a grammar-constrained decoder can only write a call that tool accepts.
    """
    defs: dict[str, Any] = {}
    alternatives = [*(_call_schema(spec["function"], defs) for spec in specs), _moving_defs(finish, defs)]
    return {"anyOf": alternatives, **({"$defs": defs} if defs else {})}


def _call_schema(function: Mapping[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "tool": {"type": "string", "const": function["name"]},
            "arguments": _moving_defs(function["parameters"], defs),
        },
        "required": ["tool", "arguments"],
        "additionalProperties": False,
    }


def _moving_defs(schema: Mapping[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A copy of `schema` whose $defs moved into `defs`: pydantic's "#/$defs/X" refs resolve against the root."""
    schema = copy.deepcopy(dict(schema))
    for key, value in schema.pop("$defs", {}).items():
        if defs.setdefault(key, value) != value:
            raise ValueError(f"two schemas define a different {key!r} in $defs")
    return schema


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


def valid_unicode(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD. A model server may send one as a JSON escape;
    such text cannot be encoded as UTF-8, so protobuf, Kafka's serialiser and Postgres would refuse it."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def storable(text: str) -> str:
    """`text` as every store takes it: without NUL (Postgres refuses one in text) and valid UTF-8."""
    return valid_unicode(text.replace("\x00", ""))


def strip_fences(text: str) -> str:
    """The reply trimmed if it is JSON as it stands; else the JSON inside its ```json fence, if it has one."""
    return _unfenced(text)[0]


_NOT_JSON = object()


def _unfenced(text: str) -> tuple[str, Any]:
    """The reply's JSON text and its value (_NOT_JSON if it does not parse), parsed once. JSON first: a string
    value may quote ``` ("run ```make deploy``` first"), which is no fence."""
    body = text.strip()
    value = _loads(body)
    if value is _NOT_JSON and (match := _LINE_FENCE.search(text) or _FENCE.search(text)):
        body = match.group(1).strip()
        value = _loads(body)
    return body, value


def _loads(body: str) -> Any:
    """`body` parsed as JSON (raw control characters let through), or _NOT_JSON."""
    try:
        # raw control characters inside strings are let through: llama-cpp-python's grammars for a JSON
        # schema allow them (its plain-JSON grammar does not), and a newline in a text is no reason to repair
        return json.loads(body, strict=False)
    except (ValueError, RecursionError):
        return _NOT_JSON


def parse_reply(text: str, schema: type[M]) -> M:
    """The reply validated as `schema`; raises pydantic.ValidationError (bad JSON included)."""
    body, value = _unfenced(text)
    # not JSON: pydantic describes the bad JSON (and refuses nesting past its own limit)
    return schema.model_validate_json(body if value is _NOT_JSON else json.dumps(value))


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
