"""ModelClient against a real OpenAI-compatible HTTP server (tests/support/model_server.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import REGISTRY
from pydantic import BaseModel

from services import tracing
from services.llm.client import Completion, ModelClient, Usage
from services.llm.errors import ModelOutputInvalid, ModelRequestRejected, ModelUnavailable
from services.llm.settings import ModelStageSettings
from tests.support.model_server import ModelServer, Reply


class Fact(BaseModel):
    subject: str
    statement: str


class Facts(BaseModel):
    facts: list[Fact]


GOOD = {"facts": [{"subject": "alice", "statement": "moved to Lisbon"}]}
ASK = [{"role": "system", "content": "Extract facts."}, {"role": "user", "content": "Alice moved to Lisbon."}]


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running


def settings_for(server: ModelServer, **overrides: object) -> ModelStageSettings:
    fast = {"timeout_s": 2.0, "max_retries": 2, "backoff_s": 0.01, "max_backoff_s": 0.05, "model": "qwen-test"}
    return ModelStageSettings(base_url=server.base_url, **{**fast, **overrides})


@pytest.fixture
async def client(server: ModelServer) -> AsyncIterator[ModelClient]:
    async with ModelClient("deriver", settings_for(server)) as model_client:
        yield model_client


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_structured_reply_is_validated_into_the_schema(server: ModelServer, client: ModelClient) -> None:
    server.script([Reply(content=GOOD, model="qwen2.5-coder-0.5b-instruct-q4")])

    completion = await client.structured(ASK, Facts)

    assert isinstance(completion, Completion)
    assert completion.value == Facts.model_validate(GOOD)
    assert completion.attempts == 1
    assert completion.model == "qwen2.5-coder-0.5b-instruct-q4"  # what the server reported
    assert Facts.model_validate_json(completion.raw) == completion.value
    sent = server.requests[0]
    assert (sent["model"], sent["messages"], sent["temperature"]) == ("qwen-test", ASK, 0.0)


async def test_a_fenced_reply_is_accepted(server: ModelServer, client: ModelClient) -> None:
    server.script([Reply(content='```json\n{"facts": []}\n```')])

    completion = await client.structured(ASK, Facts)

    assert completion.value == Facts(facts=[]) and completion.attempts == 1


async def test_garbage_then_a_repaired_reply_succeeds_on_the_second_attempt(
    server: ModelServer, client: ModelClient
) -> None:
    server.script([Reply(content="Sure! Alice moved."), Reply(content=GOOD)])

    completion = await client.structured(ASK, Facts)

    assert completion.value == Facts.model_validate(GOOD)
    assert completion.attempts == 2
    repair = server.requests[1]["messages"]
    assert completion.repair == repair  # for a caller that budgets what it sends (Chat's token budget)
    assert repair[: len(ASK)] == ASK
    assert repair[len(ASK)] == {"role": "assistant", "content": "Sure! Alice moved."}
    assert repair[-1]["role"] == "user" and "Invalid JSON" in repair[-1]["content"]
    assert server.requests[1]["response_format"] == server.requests[0]["response_format"]


async def test_a_reply_with_the_wrong_shape_is_repaired_with_the_field_named(
    server: ModelServer, client: ModelClient
) -> None:
    server.script([Reply(content={"facts": [{"subject": "alice"}]}), Reply(content=GOOD)])

    completion = await client.structured(ASK, Facts)

    assert completion.attempts == 2
    assert "facts.0.statement: Field required" in server.requests[1]["messages"][-1]["content"]


async def test_garbage_twice_raises_model_output_invalid(server: ModelServer, client: ModelClient) -> None:
    server.script([Reply(content="no"), Reply(content="still no")])

    with pytest.raises(ModelOutputInvalid) as caught:
        await client.structured(ASK, Facts)

    assert caught.value.raw == "still no"
    assert "Invalid JSON" in caught.value.error
    assert len(server.requests) == 2  # one repair attempt, no more


async def test_a_server_error_is_retried_then_succeeds(server: ModelServer, client: ModelClient) -> None:
    server.script([Reply(status=500), Reply(status=503), Reply(content=GOOD)])

    completion = await client.structured(ASK, Facts)

    assert completion.value == Facts.model_validate(GOOD)
    assert completion.attempts == 1  # transport retries are not model attempts
    assert len(server.requests) == 3


async def test_rate_limiting_is_retried_after_the_servers_hint(server: ModelServer, client: ModelClient) -> None:
    server.script([Reply(status=429, headers={"Retry-After": "0.04"}), Reply(content="hello")])

    started = time.perf_counter()
    completion = await client.text([{"role": "user", "content": "hi"}])

    assert completion.value == "hello"
    assert time.perf_counter() - started >= 0.04  # waited at least the hint (capped by max_backoff_s)


async def test_timeouts_are_retried_then_model_unavailable(server: ModelServer) -> None:
    server.reply_with(lambda _request: Reply(content="late", delay_s=5))
    settings = settings_for(server, timeout_s=0.3, max_retries=1)

    async with ModelClient("deriver", settings) as client:
        with pytest.raises(ModelUnavailable) as caught:
            await client.text([{"role": "user", "content": "hi"}])

    assert caught.value.attempts == 2
    assert "timed out" in str(caught.value.last_error).lower()
    assert len(server.requests) == 2


async def test_an_unreachable_server_is_model_unavailable() -> None:
    settings = ModelStageSettings(base_url="http://127.0.0.1:9/v1", max_retries=1, backoff_s=0.01, timeout_s=1)

    async with ModelClient("deriver", settings) as client:
        with pytest.raises(ModelUnavailable) as caught:
            await client.text([{"role": "user", "content": "hi"}])

    assert caught.value.attempts == 2


async def test_a_bad_request_is_rejected_without_retries(server: ModelServer, client: ModelClient) -> None:
    server.script([Reply(status=400, error_body={"error": {"message": "context length exceeded"}})])

    with pytest.raises(ModelRequestRejected) as caught:
        await client.structured(ASK, Facts)

    assert caught.value.status_code == 400
    assert "context length exceeded" in caught.value.body
    assert len(server.requests) == 1


async def test_a_rejected_model_call_span_carries_only_the_public_text(
    server: ModelServer, client: ModelClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "TRACER", provider.get_tracer("test"))
    secret = "Incorrect API key provided: sk-proj-AbCdEf123456. Organization org-SECRETORG"
    server.script([Reply(status=401, error_body={"error": {"message": secret}})] * 2)

    with pytest.raises(ModelRequestRejected) as plain:
        await client.text([{"role": "user", "content": "hi"}])
    with pytest.raises(ModelRequestRejected) as streamed:
        [item async for item in client.stream_turn(ASK)]

    spans = exporter.get_finished_spans()
    assert [(s.status.status_code, s.status.description) for s in spans] == [
        (StatusCode.ERROR, plain.value.public),
        (StatusCode.ERROR, streamed.value.public),
    ]
    assert "sk-proj" not in plain.value.public  # the provider's reply stays in the server's log
    assert [event.name for s in spans for event in s.events] == []  # no `exception` event quoting it


@pytest.mark.parametrize(
    ("mode", "expected_type"),
    [("json_schema", "json_schema"), ("json_object_schema", "json_object"), ("json_object", "json_object")],
)
async def test_each_schema_mode_sends_its_response_format(server: ModelServer, mode: str, expected_type: str) -> None:
    server.script([Reply(content=GOOD)])

    async with ModelClient("deriver", settings_for(server, schema_mode=mode)) as client:
        await client.structured(ASK, Facts, name="facts")

    sent = server.requests[0]
    assert sent["response_format"]["type"] == expected_type
    if mode == "json_schema":
        assert sent["response_format"]["json_schema"]["name"] == "facts"
        assert sent["response_format"]["json_schema"]["strict"] is True
        assert sent["response_format"]["json_schema"]["schema"]["required"] == ["facts"]
    if mode == "json_object_schema":
        assert sent["response_format"]["schema"] == Facts.model_json_schema()
    if mode == "json_object":
        assert set(sent["response_format"]) == {"type"}
        assert '"statement"' in sent["messages"][0]["content"]  # the schema travels in the prompt
    if mode != "json_object":
        assert sent["messages"] == ASK


async def test_assistant_messages_with_null_content_are_sent_as_empty_strings(
    server: ModelServer, client: ModelClient
) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "find it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "found"},
    ]

    await client.text(messages)

    assert server.requests[0]["messages"][1] == {"role": "assistant", "content": "", "tool_calls": [call]}


async def test_plain_text_completion(server: ModelServer, client: ModelClient) -> None:
    server.script([Reply(content="Alice lives in Lisbon.")])

    completion = await client.text([{"role": "user", "content": "Where does Alice live?"}])

    assert completion.value == completion.raw == "Alice lives in Lisbon."
    assert completion.usage == Usage(prompt_tokens=4, completion_tokens=4)
    assert "response_format" not in server.requests[0]


async def test_usage_is_summed_over_attempts_and_counted_per_stage(server: ModelServer) -> None:
    before = {k: metric("peerlog_llm_tokens_total", stage="summarizer", kind=k) for k in ("prompt", "completion")}
    repaired_before = metric("peerlog_llm_calls_total", stage="summarizer", outcome="repaired")
    server.script([Reply(content="not json"), Reply(content={"facts": []})])

    async with ModelClient("summarizer", settings_for(server)) as client:
        completion = await client.structured([{"role": "user", "content": "one two three"}], Facts)

    first_prompt = 3
    second_prompt = sum(len(m["content"].split()) for m in server.requests[1]["messages"])
    assert completion.usage == Usage(first_prompt + second_prompt, 2 + 2)  # "not json", '{"facts": []}'
    assert metric("peerlog_llm_tokens_total", stage="summarizer", kind="prompt") - before["prompt"] == (
        first_prompt + second_prompt
    )
    assert metric("peerlog_llm_tokens_total", stage="summarizer", kind="completion") - before["completion"] == 4
    assert metric("peerlog_llm_calls_total", stage="summarizer", outcome="repaired") - repaired_before == 1


async def test_outcomes_and_retries_are_counted(server: ModelServer) -> None:
    stage = "dialectic_low"
    before = {o: metric("peerlog_llm_calls_total", stage=stage, outcome=o) for o in ("ok", "rejected")}
    retries_before = metric("peerlog_llm_retries_total", stage=stage)
    latency_before = metric("peerlog_llm_request_seconds_count", stage=stage)
    server.script([Reply(status=502), Reply(content="fine"), Reply(status=404)])

    async with ModelClient(stage, settings_for(server)) as client:
        await client.text([{"role": "user", "content": "hi"}])
        with pytest.raises(ModelRequestRejected):
            await client.text([{"role": "user", "content": "hi"}])

    assert metric("peerlog_llm_calls_total", stage=stage, outcome="ok") - before["ok"] == 1
    assert metric("peerlog_llm_calls_total", stage=stage, outcome="rejected") - before["rejected"] == 1
    assert metric("peerlog_llm_retries_total", stage=stage) - retries_before == 1
    assert metric("peerlog_llm_request_seconds_count", stage=stage) - latency_before == 3


async def test_the_api_key_comes_from_the_named_variable(server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PEERLOG_TEST_ABSENT_KEY", raising=False)
    monkeypatch.setenv("PEERLOG_TEST_PRESENT_KEY", "sk-peerlog")

    cases = (("PEERLOG_TEST_ABSENT_KEY", "Bearer none"), ("PEERLOG_TEST_PRESENT_KEY", "Bearer sk-peerlog"))
    for env, expected in cases:
        async with ModelClient("deriver", settings_for(server, api_key_env=env)) as client:
            await client.text([{"role": "user", "content": "hi"}])
        assert server.calls[-1].headers["authorization"] == expected


TOOL = {"type": "function", "function": {"name": "lookup", "description": "Look up.", "parameters": {"type": "object"}}}
CALL = {"id": "call_7", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "Lisbon"}'}}


async def test_a_turn_offers_the_tools_and_returns_the_calls_the_model_made(server, client):
    server.script([Reply(tool_calls=[CALL])])
    done = await client.turn(ASK, [TOOL])
    assert server.chat_requests()[0]["tools"] == [TOOL]
    assert done.value.content == "" and [(c.id, c.name, c.arguments) for c in done.value.tool_calls] == [
        ("call_7", "lookup", '{"q": "Lisbon"}')
    ]


async def test_a_streamed_turn_yields_text_pieces_then_the_whole_turn_with_usage(server, client):
    server.script([Reply(content="Alice lives in Lisbon now")])
    items = [item async for item in client.stream_turn(ASK)]
    *pieces, done = items
    assert len(pieces) == 5 and "".join(pieces) == "Alice lives in Lisbon now"
    assert isinstance(done, Completion) and done.value.content == "Alice lives in Lisbon now"
    assert done.usage.completion_tokens == 5 and "tools" not in server.chat_requests()[0]


async def test_a_streamed_turn_reassembles_tool_calls(server, client):
    server.script([Reply(tool_calls=[CALL])])
    *_, done = [item async for item in client.stream_turn(ASK, [TOOL])]
    assert [(c.id, c.name, c.arguments) for c in done.value.tool_calls] == [("call_7", "lookup", '{"q": "Lisbon"}')]


async def test_a_stream_with_null_or_deltaless_choices_and_unnumbered_calls_is_read_around_them(server, client):
    # each of these raised AttributeError, which reached ChatStream's caller as INTERNAL
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    server.script(
        [
            Reply(
                chunks=[
                    [None],
                    [{"index": 0}],
                    [{"index": 0, "delta": None}],
                    [{"index": 0, "delta": {"content": "found "}}],
                    [{"index": 0, "delta": {"tool_calls": [None, call]}}],
                    [{"index": 0, "delta": {"content": "it"}, "finish_reason": "stop"}],
                ]
            )
        ]
    )
    *pieces, done = [item async for item in client.stream_turn(ASK, [TOOL])]
    assert pieces == ["found ", "it"] and done.value.content == "found it"
    assert [(c.id, c.name, c.arguments) for c in done.value.tool_calls] == [("c1", "lookup", '{"q": "x"}')]


async def test_a_stream_that_cannot_open_is_retried_then_unavailable(server, client):
    server.script([Reply(status=503)] * 3)
    with pytest.raises(ModelUnavailable):
        [item async for item in client.stream_turn(ASK)]
    assert len(server.chat_requests()) == 3


async def test_a_stream_that_ends_without_a_finish_reason_is_unavailable_not_an_answer(server, client):
    # a server that ends its body by closing the connection, cut off mid-answer: the SDK sees an end, and
    # "Bob does not live in Oslo any more" came back as the whole answer "Bob does not"
    words = [[{"index": 0, "delta": {"content": word}}] for word in ("Bob ", "does ", "not")]
    server.script([Reply(chunks=words)])
    pieces = []
    with pytest.raises(ModelUnavailable, match="stream ended before it finished"):
        async for item in client.stream_turn(ASK):
            pieces.append(item)
    assert pieces == ["Bob ", "does ", "not"]  # handed on as they came; the turn itself never is


async def test_an_answer_past_max_tokens_is_a_model_error_not_a_client_size_failure(server):
    # a server that ignores max_tokens: its 5 MB answer reached Chat's caller as RESOURCE_EXHAUSTED
    # "Received message larger than max", which reads as the caller's own fault
    async with ModelClient("dialectic_low", settings_for(server, max_tokens=100)) as client:
        server.reply_with(lambda request: Reply(content="Oslo " * 1_000))
        with pytest.raises(ModelOutputInvalid, match=r"longer than max_tokens \(100\) allows: over 1600 bytes"):
            await client.turn(ASK)
        pieces = []
        with pytest.raises(ModelOutputInvalid, match=r"longer than max_tokens \(100\) allows"):
            async for item in client.stream_turn(ASK):
                pieces.append(item)
        assert sum(map(len, pieces)) <= 1600  # it stopped reading at the bound
        server.reply_with(lambda request: Reply(content="Oslo " * 300))  # 1,500 bytes: within the bound
        assert (await client.turn(ASK)).value.content.count("Oslo") == 300
        assert [item async for item in client.stream_turn(ASK)][-1].value.content.count("Oslo") == 300
