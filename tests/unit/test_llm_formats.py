"""Pure structured-output helpers: request shapes, fence stripping, message repair."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ValidationError

from services.llm import formats


class Fact(BaseModel):
    subject: str
    statement: str
    confidence: float = 0.5


class Facts(BaseModel):
    facts: list[Fact]


def test_json_schema_mode_sends_a_strict_openai_schema() -> None:
    fmt = formats.response_format("json_schema", Facts.model_json_schema(), "Facts")

    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "Facts" and fmt["json_schema"]["strict"] is True
    fact = fmt["json_schema"]["schema"]["$defs"]["Fact"]
    # strict mode: every property required, no extra keys
    assert set(fact["required"]) == {"subject", "statement", "confidence"}
    assert fact["additionalProperties"] is False


def test_json_object_schema_mode_sends_the_pydantic_schema_inline() -> None:
    assert formats.response_format("json_object_schema", Facts.model_json_schema(), "Facts") == {
        "type": "json_object",
        "schema": Facts.model_json_schema(),
    }


def test_json_object_mode_sends_plain_json_mode() -> None:
    assert formats.response_format("json_object", Facts.model_json_schema(), "Facts") == {"type": "json_object"}


def test_schema_instruction_carries_the_schema() -> None:
    text = formats.schema_instruction(Facts.model_json_schema())
    schema = json.loads(text[text.index("{") :])
    assert "JSON" in text and schema == Facts.model_json_schema()


def test_instruction_joins_a_leading_system_message_or_becomes_one() -> None:
    with_system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    without = [{"role": "user", "content": "hi"}]

    assert formats.with_instruction(with_system, "X")[0] == {"role": "system", "content": "Be brief.\n\nX"}
    assert formats.with_instruction(without, "X") == [{"role": "system", "content": "X"}, *without]
    assert with_system[0]["content"] == "Be brief."  # the caller's list is not changed


def test_schema_name_is_made_safe_for_openai() -> None:
    assert formats.schema_name(Facts) == "Facts"
    assert formats.schema_name(Facts, "peer card.v2") == "peer_card_v2"
    assert len(formats.schema_name(Facts, "x" * 100)) == 64


def test_assistant_messages_never_carry_null_content() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    messages = [{"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "user", "content": "hi"}]

    out = formats.normalise_messages(messages)

    assert out[0] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert messages[0]["content"] is None  # copies, not edits


@pytest.mark.parametrize(
    "reply",
    [
        '{"facts": []}',
        '```json\n{"facts": []}\n```',
        '```\n{"facts": []}\n```',
        'Here it is:\n```json\n{"facts": []}\n```\nAnything else?',
        '  {"facts": []}\n',
    ],
)
def test_replies_parse_with_or_without_code_fences(reply: str) -> None:
    assert formats.parse_reply(reply, Facts) == Facts(facts=[])


QUOTED = "Alice runs ```make deploy``` before Friday"


@pytest.mark.parametrize(
    "reply",
    [
        json.dumps({"facts": [{"subject": "alice", "statement": QUOTED}]}),
        "```json\n" + json.dumps({"facts": [{"subject": "alice", "statement": QUOTED}]}) + "\n```",
        "Here:\n```\n" + json.dumps({"facts": [{"subject": "alice", "statement": QUOTED}]}) + "\n```\nDone.",
    ],
)
def test_a_reply_whose_string_quotes_a_code_fence_parses_as_itself(reply: str) -> None:
    # a message quoting a command in fences made its facts "not JSON": the batch was dead-lettered
    assert formats.parse_reply(reply, Facts) == Facts(facts=[Fact(subject="alice", statement=QUOTED)])


def test_a_raw_newline_inside_a_string_is_read_as_a_newline() -> None:
    # llama-cpp-python's schema grammars let a model write one; strict JSON would call the reply invalid
    assert formats.parse_reply('{"facts": [{"subject": "a", "statement": "line one\nline two"}]}', Facts) == Facts(
        facts=[Fact(subject="a", statement="line one\nline two")]
    )


def test_bad_json_and_wrong_shapes_both_raise_validation_errors() -> None:
    with pytest.raises(ValidationError):
        formats.parse_reply("not json at all", Facts)
    with pytest.raises(ValidationError):
        formats.parse_reply('{"facts": [{"subject": "alice"}]}', Facts)


def test_error_description_names_each_bad_field() -> None:
    with pytest.raises(ValidationError) as caught:
        formats.parse_reply('{"facts": [{"subject": "alice", "confidence": "high"}]}', Facts)

    text = formats.describe_error(caught.value)

    assert "- facts.0.statement: Field required" in text
    assert "- facts.0.confidence:" in text


def test_repair_conversation_quotes_the_bad_reply_and_the_error() -> None:
    messages = [{"role": "user", "content": "extract"}]

    out = formats.repair_messages(messages, "{oops", "- (root): Invalid JSON")

    assert out[:1] == messages
    assert out[1] == {"role": "assistant", "content": "{oops"}
    assert out[2]["role"] == "user" and "- (root): Invalid JSON" in out[2]["content"]
    assert "only the corrected JSON" in out[2]["content"]


def test_json_object_schema_mode_drops_string_bounds_a_grammar_cannot_hold() -> None:
    schema = {
        "type": "object",
        "properties": {"long": {"type": "string", "maxLength": 2000}, "short": {"type": "string", "maxLength": 200}},
    }
    sent = formats.response_format("json_object_schema", schema, "S")["schema"]
    assert sent["properties"] == {"long": {"type": "string"}, "short": {"type": "string", "maxLength": 200}}
    assert schema["properties"]["long"]["maxLength"] == 2000  # the caller's schema is not changed
