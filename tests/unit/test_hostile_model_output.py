"""What a model (steered, say, by a stored message) can send back: each is an error result the model can
correct or a clear status, never an exception out of Chat."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import grpc
import pytest
from pydantic import ValidationError

from services.api.errors import status_for
from services.dialectic.loop import _schema_error, answer_text, unwrapped
from services.dialectic.policy import CallTools, Limits, LoopState, ModelTurn, decide
from services.llm.client import ToolCall
from services.llm.errors import ModelOutputInvalid, ModelRequestRejected, ModelUnavailable
from services.llm.formats import parse_reply, valid_unicode
from services.toolloop.memory import GrepMessages, MessagesByDateRange
from services.toolloop.registry import Tool, ToolResult, run_call
from services.toolloop.turns import StructuredReply

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RAN: list = []


async def _grep(env, args: GrepMessages) -> ToolResult:
    RAN.append(args)
    return ToolResult("ok", {}, 0)


async def _window(env, args: MessagesByDateRange) -> ToolResult:
    RAN.append(args)
    return ToolResult("ok", {}, 0)


TOOLS = {
    "grep_messages": Tool("grep_messages", GrepMessages, _grep),
    "by_date": Tool("by_date", MessagesByDateRange, _window),
}


def call(name: str, arguments: str) -> ToolResult:
    RAN.clear()
    return asyncio.run(run_call(TOOLS, None, ToolCall("c1", name, arguments), list(TOOLS)))


@pytest.mark.parametrize(
    "arguments, said",
    [
        ('{"pattern": "a\\u0000b"}', "NUL"),  # Postgres refuses it: the whole Chat failed INTERNAL
        ('{"pattern": "x", "limit": 5, "extra": {"k\\u0000": 1}}', "NUL"),
        ("[" * 5000, "nest too deeply"),  # json.loads raised RecursionError, not ValueError
        ('{"pattern": ' + "[" * 900 + "]" * 900 + "}", "nest too deeply"),
    ],
)
def test_a_call_with_nul_or_deep_nesting_is_a_bad_arguments_result_and_runs_nothing(arguments, said):
    result = call("grep_messages", arguments)
    assert result.text.startswith("error: bad arguments for grep_messages") and said in result.text
    assert RAN == []


@pytest.mark.parametrize("limit", [True, 5.0, "5"])
def test_a_count_must_be_an_integer_not_a_bool_float_or_text(limit):
    result = call("grep_messages", json.dumps({"pattern": "x", "limit": limit}))
    assert "valid integer" in result.text and RAN == []


@pytest.mark.parametrize("after", [1e11, 1700000000, True])
def test_a_time_given_as_a_number_is_refused_not_read_as_seconds_since_1970(after):
    result = call("by_date", json.dumps({"after": after}))
    assert "ISO 8601" in result.text and RAN == []


@pytest.mark.parametrize("after", ["2024-05-01", "2024-05-01T14:30:00Z", "2024-05-01T14:30:00"])
def test_a_time_as_iso_text_is_accepted_in_utc_when_it_has_no_zone(after):
    assert call("by_date", json.dumps({"after": after})).text == "ok"
    assert RAN[0].after.utcoffset().total_seconds() == 0


@pytest.mark.parametrize("before", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:00:00-05:00"])
def test_a_time_whose_offset_carries_it_past_the_calendar_is_a_bad_arguments_result(before):
    # kept with its offset, it overflowed when the search converted it, and Chat answered INTERNAL
    result = call("by_date", json.dumps({"before": before}))
    assert "outside the years 1 to 9999 in UTC" in result.text and RAN == []


def test_a_time_with_an_offset_is_taken_in_utc():
    assert call("by_date", json.dumps({"after": "2024-05-01T02:00:00+02:00"})).text == "ok"
    assert RAN[0].after == datetime(2024, 5, 1, tzinfo=UTC) and RAN[0].after.utcoffset().total_seconds() == 0


def test_a_turn_asking_for_many_tools_at_once_runs_only_the_first_sixteen_in_the_rounds_room():
    calls = tuple(ToolCall(f"c{i}", "grep_messages", f'{{"pattern": "p{i}"}}') for i in range(60))
    limits = Limits(tool_rounds=3, token_budget=32_000, result_tokens=2_000)
    decision = decide(LoopState(spent_tokens=300), ModelTurn("", calls), limits, 300)
    # the room keeps this round's results, the next call and the answer's within the budget
    assert decision == CallTools(calls[:16], dropped=44, room=(32_000 - 300) // 2 - 300)


def test_nesting_past_the_parser_limit_in_a_structured_reply_is_a_validation_error():
    with pytest.raises(ValidationError):
        parse_reply('{"tool": "grep_messages", "arguments": {"pattern": ' + "[" * 5000 + "}}", StructuredReply)


def test_a_json_answer_with_a_lone_surrogate_is_a_schema_problem_to_repair():
    assert "not valid Unicode" in asyncio.run(_schema_error('{"city": "Oslo \\ud800"}', {"type": "object"}))
    assert asyncio.run(_schema_error('{"city": "Oslo \\ud83d\\ude00"}', {"type": "object"})) is None


@pytest.mark.parametrize("answer", ["NaN", '{"age": Infinity}', '{"age": -Infinity}', '{"age": 1e999}'])
def test_a_json_answer_with_a_number_json_cannot_express_is_a_problem_to_repair(answer):
    # 1e999 passed as infinity and was sent on as {"age":Infinity}, which is not JSON
    assert asyncio.run(_schema_error(answer, {"type": ["object", "number"]})).startswith("not JSON")


@pytest.mark.parametrize("answer", ["NaN", "Infinity", "1" + "0" * 400])
def test_a_number_the_schemas_arithmetic_cannot_take_is_a_problem_not_an_internal_error(answer):
    # multipleOf raised ValueError or OverflowError out of Chat
    assert asyncio.run(_schema_error(answer, {"type": "number", "multipleOf": 0.5}))


def test_a_lone_surrogate_in_model_text_becomes_the_replacement_character():
    assert valid_unicode("a\ud800b\U0001f600") == "a\ufffdb\U0001f600"
    valid_unicode("x\udfff").encode()  # encodable now


def test_only_an_unreachable_model_is_unavailable_to_retry():
    assert status_for(ModelUnavailable("dialectic_low", 3, TimeoutError())) == grpc.StatusCode.UNAVAILABLE
    assert status_for(ModelRequestRejected("dialectic_low", 400, "context too long")) == grpc.StatusCode.INTERNAL
    assert status_for(ModelOutputInvalid("dialectic_low", "{}", "city: missing")) == grpc.StatusCode.INTERNAL


class _Reads:
    """Chat's reads: one explicit observation, and a grep that finds 50 long messages."""

    def __init__(self) -> None:
        self.greps = 0

    async def evidence(self, scope, vector, per_kind, history):
        from services.dialectic.ports import Evidence

        return Evidence(
            [{"observation_id": "o1", "level": "explicit", "created_at": NOW, "content": "Bob keeps bees"}],
            [],
            [],
            True,
            {},
        )

    async def grep_messages(self, scope, pattern, limit, before):
        self.greps += 1
        row = {"session_id": "s", "peer_id": "bob", "author_name": None, "created_at": NOW, "content": "x " * 300}
        return [{**row, "message_id": f"m{i}"} for i in range(limit)]


class _Embedder:
    async def embed(self, texts):
        return [[0.0] * 4 for _ in texts]


class _Model:
    """Asks for sixty greps in its first turn, then answers; records each request's prompt size."""

    stage = "dialectic_low"

    def __init__(self) -> None:
        from services.llm.settings import ModelStageSettings

        self.settings, self.prompts = ModelStageSettings(), []

    async def turn(self, messages, tools):
        from services.dialectic.loop import conversation_tokens
        from services.llm.client import AssistantTurn, Completion, Usage

        self.prompts.append(conversation_tokens(messages))
        if len(self.prompts) > 1:
            return Completion(AssistantTurn("Bob keeps bees [obs:o1]"), "", "m", Usage(), 1)
        calls = tuple(
            ToolCall(f"c{i}", "grep_messages", json.dumps({"pattern": f"p{i}", "limit": 50})) for i in range(60)
        )
        return Completion(AssistantTurn("", calls), "", "m", Usage(), 1)


def test_sixty_tool_calls_in_one_turn_run_as_many_as_the_budget_has_room_for():
    from services.dialectic.loop import ChatRequest, Dialectic
    from services.dialectic.settings import DialecticSettings

    reads, model, settings = _Reads(), _Model(), DialecticSettings()
    result = asyncio.run(
        Dialectic(reads, _Embedder(), settings, {"low": model}).chat(ChatRequest("w", "alice", "bob", "Q?"))
    )
    assert result.answer == "Bob keeps bees [obs:o1]"
    # 60 reads before, and the next prompt carried 183,923 tokens against a budget of 32,000
    assert reads.greps < 16  # as many as fit: six here (this text is dense, two characters a token)
    assert sum(model.prompts) <= settings.token_budget


@pytest.mark.parametrize(
    "answer, text",
    [
        ("Oslo", '"Oslo"'),  # a schema of type string: was passed on unquoted, and always needed a repair
        ('{"city": "Oslo"}', '{"city": "Oslo"}'),  # JSON text given as a string stays as it is
        ({"city": "Oslo"}, '{"city": "Oslo"}'),
        (7, "7"),
    ],
)
def test_a_structured_answer_under_a_response_format_is_json_text(answer, text):
    assert answer_text(answer, as_json=True) == text
    assert answer_text("Oslo", as_json=False) == "Oslo"


def test_a_repair_written_in_the_structured_turns_wrapper_gives_its_answer():
    assert unwrapped('{"answer": {"city": "Oslo"}, "cited_ids": ["m1"]}') == '{"city": "Oslo"}'
    assert unwrapped('{"city": "Oslo"}') is None
    assert unwrapped('{"tool": "grep_messages", "arguments": {}}') is None


@pytest.mark.parametrize("reply", ["{}", '{"Facts": []}', '{"observations": [{"content": "x"}]}'])
def test_a_deriver_reply_of_the_wrong_shape_goes_to_repair_not_to_an_empty_derivation(reply):
    # read as "no facts", it marked the batch derived with nothing: never dead-lettered, never retried
    from services.deriver.prompt import Extraction

    with pytest.raises(ValidationError):
        parse_reply(reply, Extraction)
    assert parse_reply('{"facts": []}', Extraction).facts == []  # saying there are none stays an answer


@pytest.mark.parametrize("content", ["", "   ", "...", "Ada", "Ada."])
def test_a_fact_that_states_nothing_beyond_the_targets_name_is_rejected(content):
    from services.deriver.batching import PendingMessage
    from services.deriver.judge import ground
    from services.deriver.prompt import ExtractedFact

    window = [
        PendingMessage(
            message_id="m1", session_id="s", content="I keep bees", created_at=NOW, seq=1, tokens=3, perceived_at=NOW
        )
    ]
    fact = ExtractedFact(content=content, message_id="m1", span="I keep bees")
    assert "states nothing" in ground(fact, window, observed_id="Ada")
