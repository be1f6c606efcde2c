"""examples/agent.py against the real stack and the HTTP test model: two turns, one with a native tool call
and one with the call written as JSON in the text (as small local models do)."""

from __future__ import annotations

import json

from openai import OpenAI

from tests.integration.test_client_library import api  # noqa: F401 - api: the fixture
from tests.integration.test_memory_provider import chats, make_provider, seeded  # noqa: F401 - make_provider
from tests.support.example_agent import load_agent_example
from tests.support.model_server import Reply

agent = load_agent_example()
GIFT, WALK = "What gift should I buy myself?", "And where should I walk this weekend?"
HONEY, RIVER = "You keep bees on your roof, so: a honey shop.", "Along the river in Lisbon, since you like long walks."


def model(request: dict) -> Reply:
    """The agent's model: turn 1 calls peerlog_search natively, turn 2 writes the call as fenced JSON;
    each answers once the result is in. Any other request is the dialectic behind Chat."""
    messages = request["messages"]
    if not messages[0]["content"].startswith(agent.SYSTEM):
        return Reply(content="Alice keeps bees and likes long walks.")
    last = messages[-1]
    if last["role"] == "tool":
        return Reply(content=HONEY)
    if last["content"].startswith("peerlog_search returned:"):
        return Reply(content=json.dumps({"answer": RIVER}))
    if last["content"] == GIFT:
        return Reply(
            tool_calls=[
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "peerlog_search", "arguments": json.dumps({"query": "bees"})},
                }
            ]
        )
    return Reply(content='```json\n{"name": "peerlog_search", "arguments": {"query": "long walks"}}\n```')


def agent_requests(model_server) -> list[dict]:
    return [r for r in chats(model_server) if r["messages"][0]["content"].startswith(agent.SYSTEM)]


def test_two_agent_turns_inject_memory_run_a_tool_each_answer_and_are_written(make_provider, model_server):
    model_server.reply_with(model)
    memory = seeded(make_provider())
    memory.record_turn("I like long walks", "Noted.")
    memory.flush()
    memory.peer("bot").set_card(["ATTRIBUTE: keeps bees"], target="alice")
    client, history = OpenAI(base_url=model_server.base_url, api_key="x"), []

    first = agent.run_turn(memory, client, "test-model", history, GIFT)
    second = agent.run_turn(memory, client, "test-model", history, WALK)

    # the injected memory: the card and Chat's answer, in the system prompt the model got
    assert "ATTRIBUTE: keeps bees" in first.injected and "Alice keeps bees" in first.injected
    asked = agent_requests(model_server)
    assert len(asked) == 4  # per turn: the call, then the answer
    assert first.injected in asked[0]["messages"][0]["content"]
    assert "ATTRIBUTE: keeps bees" in asked[2]["messages"][0]["content"]
    # each turn dispatched peerlog_search and fed its result back
    assert [(name, json.loads(args)) for name, args, _ in first.tool_calls] == [("peerlog_search", {"query": "bees"})]
    assert "roof in Lisbon" in first.tool_calls[0][2]
    assert asked[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": first.tool_calls[0][2]}
    assert asked[1]["messages"][-2]["content"] == ""  # never None: some servers answer 500 to it
    assert [(name, json.loads(args)) for name, args, _ in second.tool_calls] == [
        ("peerlog_search", {"query": "long walks"})
    ]
    assert "I like long walks" in second.tool_calls[0][2]
    assert second.tool_calls[0][2] in asked[3]["messages"][-1]["content"]
    # the answers, the history the second turn saw, and the turns written to peerlog
    assert (first.answer, second.answer) == (HONEY, RIVER)
    assert [m["content"] for m in asked[2]["messages"][1:3]] == [GIFT, HONEY]
    memory.flush()
    written = [m.content for m in memory.workspace().session("global", create=False).messages()]
    assert written[-4:] == [GIFT, HONEY, WALK, RIVER]
