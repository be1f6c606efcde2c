"""examples/agent.py reads a tool call from native tool_calls or from JSON in the text, and never sends
content None back."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tests.support.example_agent import load_agent_example

agent = load_agent_example()
TOOLS = ["peerlog_search", "peerlog_profile"]


@pytest.mark.parametrize(
    "content",
    [
        '{"name": "peerlog_search", "arguments": {"query": "sister"}}',
        '```json\n{\n  "name": "peerlog_search",\n  "arguments": {\n    "query": "sister"\n  }\n}\n```',
        'Let me look.\n```\n{"name": "peerlog_search", "arguments": {"query": "sister"}}\n```',
        '{"name": "peerlog_search", "arguments": "{\\"query\\": \\"sister\\"}"}',  # arguments as a JSON string
        '{"name": "peerlog_search", "arguments": {"query": "sister"}}\n{"name": "peerlog_profile", "arguments": {}}',
    ],
)
def test_a_tool_call_written_as_json_is_read_as_a_call(content):
    call = agent.parse_text_reply(content, TOOLS)
    assert call == agent.Call("peerlog_search", json.dumps({"query": "sister"}))


@pytest.mark.parametrize(
    ("content", "answer"),
    [
        ("Maya is afraid of heights, so take tram 28.", "Maya is afraid of heights, so take tram 28."),
        ('{"answer": "Try Livraria Bertrand."}', "Try Livraria Bertrand."),
        ('```json\n{"answer": "Try Livraria Bertrand."}\n```', "Try Livraria Bertrand."),
        ("", ""),
        (None, ""),
        ("Use {curly} braces freely.", "Use {curly} braces freely."),
    ],
)
def test_plain_text_and_an_answer_object_are_the_answer(content, answer):
    assert agent.parse_text_reply(content, TOOLS) == answer


@pytest.mark.parametrize(
    "content",
    [
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}',  # not an offered tool
        '{"name": "peerlog_search", "arguments": {"query": "x"}, "extra": 1}',  # not the call's shape
        '{"name": "peerlog_search", "arguments": "{not json"}',
        '{"name": "peerlog_search", "arguments": {"query": "x"',  # cut off
    ],
)
def test_json_that_is_not_an_offered_call_stays_text(content):
    assert agent.parse_text_reply(content, TOOLS) == content


def test_no_tools_offered_means_no_call_is_read_from_text():
    content = '{"name": "peerlog_search", "arguments": {"query": "x"}}'
    assert agent.parse_text_reply(content, []) == content


def test_native_tool_calls_win_over_the_text():
    native = SimpleNamespace(id="call_7", function=SimpleNamespace(name="peerlog_profile", arguments="{}"))
    reply = SimpleNamespace(content='{"name": "peerlog_search", "arguments": {"query": "x"}}', tool_calls=[native])
    assert agent.calls_in(reply, TOOLS) == [agent.Call("peerlog_profile", "{}", "call_7")]


def test_native_results_go_back_as_tool_messages_with_empty_not_none_content():
    calls = [agent.Call("peerlog_search", '{"query": "x"}', "call_1"), agent.Call("peerlog_profile", "{}", "call_2")]
    assistant, *tools = agent.results_as_messages(calls, ["found", "card"], None)
    assert assistant["content"] == "" and [c["id"] for c in assistant["tool_calls"]] == ["call_1", "call_2"]
    assert tools == [
        {"role": "tool", "tool_call_id": "call_1", "content": "found"},
        {"role": "tool", "tool_call_id": "call_2", "content": "card"},
    ]


def test_a_result_of_a_call_read_from_text_goes_back_as_a_user_message():
    text = '{"name": "peerlog_search", "arguments": {"query": "x"}}'
    assistant, user = agent.results_as_messages([agent.Call("peerlog_search", '{"query": "x"}')], ["found"], text)
    assert assistant == {"role": "assistant", "content": text}
    assert user["role"] == "user" and user["content"].startswith("peerlog_search returned:\nfound")
