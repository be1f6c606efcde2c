"""The test model server speaks enough of the OpenAI API for the real SDK: JSON, SSE, models, errors."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.support.model_server import ModelServer, Reply


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running


@pytest.fixture
def sdk(server: ModelServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=5)


def test_models_are_listed(sdk: openai.OpenAI) -> None:
    assert [m.id for m in sdk.models.list().data] == ["test-model"]


def test_default_reply_echoes_the_last_user_message_with_word_count_usage(sdk: openai.OpenAI) -> None:
    reply = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello there you"}])

    assert reply.choices[0].message.content == "hello there you"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (3, 3)
    assert reply.model == "m"


def test_a_handler_sees_each_request(server: ModelServer, sdk: openai.OpenAI) -> None:
    server.reply_with(lambda request: Reply(content={"n": len(request["messages"])}))

    reply = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}] * 3)

    assert reply.choices[0].message.content == '{"n": 3}'


def test_tool_calls_are_returned_in_openai_shape(server: ModelServer, sdk: openai.OpenAI) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "alice"}'}}
    server.script([Reply(tool_calls=[call])])

    message = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}]).choices[0].message

    assert message.content is None
    assert message.tool_calls[0].function.name == "search"
    assert message.tool_calls[0].function.arguments == '{"q": "alice"}'


def test_streaming_sends_the_text_in_pieces_then_usage(server: ModelServer, sdk: openai.OpenAI) -> None:
    server.script([Reply(content="Alice moved to Lisbon.")])

    chunks = list(
        sdk.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "where?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert pieces == ["Alice ", "moved ", "to ", "Lisbon."]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == 4


def test_errors_carry_the_status_and_body(server: ModelServer, sdk: openai.OpenAI) -> None:
    server.script([Reply(status=503, error_body={"error": {"message": "overloaded"}})])

    with pytest.raises(openai.InternalServerError, match="overloaded"):
        sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])


def test_a_script_is_used_in_order_and_then_refused(server: ModelServer, sdk: openai.OpenAI) -> None:
    server.script([Reply(content="first"), Reply(content="second")])
    ask = {"model": "m", "messages": [{"role": "user", "content": "x"}]}

    assert sdk.chat.completions.create(**ask).choices[0].message.content == "first"
    assert sdk.chat.completions.create(**ask).choices[0].message.content == "second"
    with pytest.raises(openai.BadRequestError, match="script exhausted"):
        sdk.chat.completions.create(**ask)


def test_reset_forgets_requests_and_script(server: ModelServer, sdk: openai.OpenAI) -> None:
    server.script([Reply(content="scripted")])
    sdk.embeddings.create(model="e", input=["a"], encoding_format="float")
    server.reset()

    reply = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "echo me"}])

    assert reply.choices[0].message.content == "echo me"
    assert len(server.requests) == 1
