"""Chat's token budget counts every prompt token a model call sends: its messages, the tool specs it offers,
and a schema the client writes into the prompt; and every call, a repair of an invalid turn too."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from services.dialectic.loop import ChatRequest, Dialectic, conversation_tokens
from services.dialectic.ports import Evidence
from services.dialectic.settings import DialecticSettings
from services.llm import formats
from services.llm.client import AssistantTurn, Completion, ModelClient, ToolCall, Usage
from services.llm.settings import ModelStageSettings
from services.llm.tokens import count_tokens
from tests.support.model_server import ModelServer, Reply

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PROSE = "Bob said the bees were calm today and that the honey should be ready by the end of June. "


class _Reads:
    """One observation as evidence; every grep finds a few messages of ordinary prose."""

    async def evidence(self, scope, vector, per_kind, history):
        observation = {"observation_id": "o1", "level": "explicit", "created_at": NOW, "content": "Bob keeps bees"}
        return Evidence([observation], [], [], True, {})

    async def grep_messages(self, scope, pattern, limit, before):
        row = {"session_id": "s", "peer_id": "bob", "author_name": None, "created_at": NOW, "content": PROSE * 3}
        return [{**row, "message_id": f"{pattern}-{i}"} for i in range(min(limit, 4))]


class _Embedder:
    async def embed(self, texts):
        return [[0.0] * 4 for _ in texts]


class _GreedyModel:
    """Searches whenever it is offered tools, answers only when it is not; records each request's prompt
    tokens as sent: the messages, plus the tool specs (native) or the schema text (json_object)."""

    stage = "dialectic_max"

    def __init__(self, settings: ModelStageSettings) -> None:
        self.settings, self.sent = settings, []

    async def turn(self, messages, tools):
        self.sent.append(conversation_tokens(messages) + (count_tokens(json.dumps(tools)) if tools else 0))
        if tools:
            call = ToolCall(f"c{len(self.sent)}", "grep_messages", json.dumps({"pattern": f"p{len(self.sent)}"}))
            return Completion(AssistantTurn("", (call,)), "", "m", Usage(), 1)
        return Completion(AssistantTurn("Bob keeps bees [obs:o1]"), "", "m", Usage(), 1)

    async def structured(self, messages, shape, *, name=None, wire_schema=None):
        sent = formats.with_instruction(messages, formats.schema_instruction(wire_schema))
        self.sent.append(conversation_tokens(sent))
        offered = "grep_messages" in json.dumps(wire_schema)
        if offered:
            reply = {"tool": "grep_messages", "arguments": {"pattern": f"p{len(self.sent)}"}}
        else:
            reply = {"answer": "Bob keeps bees [obs:o1]", "cited_ids": []}
        return Completion(shape.model_validate(reply), "", "m", Usage(), 1)


@pytest.mark.parametrize(
    "model_settings",
    [ModelStageSettings(), ModelStageSettings(tool_mode="structured", schema_mode="json_object")],
    ids=["native tools", "structured, schema in the prompt"],
)
def test_chat_prompt_tokens_including_tool_specs_stay_within_the_budget(model_settings):
    settings, model = DialecticSettings(), _GreedyModel(model_settings)
    chat = Dialectic(_Reads(), _Embedder(), settings, {"max": model})
    result = asyncio.run(chat.chat(ChatRequest("w", "alice", "bob", "What does Bob keep?", level="max")))
    assert result.answer == "Bob keeps bees [obs:o1]" and result.tool_rounds > 0
    assert sum(model.sent) <= settings.token_budget


def _repaired_searches(request: dict) -> Reply:
    """Every turn offered the tools is garbage at first and a search once repaired; an answer is valid."""
    if "grep_messages" not in json.dumps(request["response_format"]):
        return Reply(content={"answer": "Bob keeps bees [obs:o1]", "cited_ids": []})
    if not request["messages"][-1]["content"].startswith("Your reply was not valid JSON"):
        return Reply(content="Let me search for that.")
    return Reply(content={"tool": "grep_messages", "arguments": {"pattern": f"p{len(request['messages'])}"}})


def test_structured_turn_repairs_count_against_the_chat_token_budget():
    # a repair re-sends the whole conversation: uncounted, this Chat sent 12,450 prompt tokens on its 12,000 budget
    settings = DialecticSettings(token_budget=12_000)
    with ModelServer() as server:
        server.reply_with(_repaired_searches)

        async def chat():
            stage = ModelStageSettings(base_url=server.base_url, tool_mode="structured", schema_mode="json_schema")
            async with ModelClient("dialectic_max", stage) as model:
                dialectic = Dialectic(_Reads(), _Embedder(), settings, {"max": model})
                return await dialectic.chat(ChatRequest("w", "alice", "bob", "What does Bob keep?", level="max"))

        result = asyncio.run(chat())
        sent = [conversation_tokens(request["messages"]) for request in server.chat_requests()]
    assert result.answer == "Bob keeps bees [obs:o1]" and result.tool_rounds > 0
    assert sum(sent) <= settings.token_budget, sent
