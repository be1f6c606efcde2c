"""A model server that answers garbage (a proxy's HTML page, a body that is not JSON, null or mistyped
fields, NaN vectors, text no store takes) gives an error the processors dead-letter (ModelError,
EmbeddingError) or a value safe to put on the log: never a raw exception that stops the worker, which
would meet the same reply on every restart."""

from __future__ import annotations

import json
import math

import httpx2
import openai
import pytest

from services.llm.client import ModelClient, Usage
from services.llm.embeddings import LocalOnnxEmbedder, OpenAIEmbedder, finite
from services.llm.errors import EmbeddingError, ModelOutputInvalid, ModelRequestRejected
from services.llm.retry import as_model_error
from services.llm.settings import EmbeddingSettings, ModelStageSettings
from tests.support.mock_model import BASE_URL, MockModel, completion, vectors

REQUEST = httpx2.Request("POST", f"{BASE_URL}/chat/completions")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> MockModel:
    mock = MockModel()
    mock.install(monkeypatch)
    return mock


def model() -> ModelClient:
    return ModelClient("deriver", ModelStageSettings(base_url=BASE_URL, max_retries=0, model="asked"))


def embedder(**overrides: object) -> OpenAIEmbedder:
    settings = {"provider": "openai", "base_url": BASE_URL, "dimensions": 4, "max_retries": 0}
    return OpenAIEmbedder(EmbeddingSettings(**{**settings, **overrides}))


MALFORMED_CHAT = {
    "a proxy's HTML page": (200, "text/html", b"<html>502 bad gateway</html>"),
    "JSON that does not parse": (200, "application/json", b"{not json"),
    "choices that are not a list": completion(choices="none"),
    "no choices": completion(choices=[]),
    "a null message": completion(choices=[{"index": 0, "message": None}]),
    "content that is a number": completion({"role": "assistant", "content": 5}),
    "content that is an object": completion({"role": "assistant", "content": {"text": "hi"}}),
}


@pytest.mark.parametrize("answer", MALFORMED_CHAT.values(), ids=MALFORMED_CHAT.keys())
async def test_a_chat_reply_that_is_not_a_chat_completion_is_model_output_invalid(server, answer):
    server.answer = answer
    with pytest.raises(ModelOutputInvalid):
        await model().text([{"role": "user", "content": "hi"}])


async def test_a_mistyped_model_name_and_token_counts_are_coerced_not_fatal(server):
    server.answer = completion(model=123, usage={"prompt_tokens": "many", "completion_tokens": "7"})
    done = await model().text([{"role": "user", "content": "hi"}])
    assert done.model == "123" and isinstance(done.model, str)
    assert done.usage == Usage(0, 7)


async def test_a_model_name_without_text_is_the_one_asked_for_and_a_nul_in_one_is_dropped(server):
    server.answer = completion(model=None)
    assert (await model().text([])).model == "asked"
    server.answer = completion(model="qwen\x00-7b")
    assert (await model().text([])).model == "qwen-7b"


async def test_lone_surrogates_in_a_native_tool_call_become_replacement_characters(server):
    call = {"id": "c1", "type": "function", "function": {"name": "tool\ud800", "arguments": '{"a": "b\udc00"}'}}
    server.answer = completion({"role": "assistant", "content": None, "tool_calls": [call]})
    (made,) = (await model().turn([], tools=[])).value.tool_calls
    assert made.name == "tool\ufffd" and made.arguments == '{"a": "b\ufffd"}'
    made.arguments.encode()  # valid UTF-8 now


async def test_tool_call_arguments_sent_as_an_object_are_read_as_json_text(server):
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": {"q": 1}}}
    server.answer = completion({"role": "assistant", "content": None, "tool_calls": [call]})
    (made,) = (await model().turn([], tools=[])).value.tool_calls
    assert json.loads(made.arguments) == {"q": 1}


def chunk(delta: dict, finish_reason: str | None = None) -> str:
    body = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    return "data: " + json.dumps({**body, "choices": [choice]}) + "\n\n"


def event_stream(*chunks: str) -> tuple[int, str, bytes]:
    return (200, "text/event-stream", ("".join(chunks) + "data: [DONE]\n\n").encode())


async def test_lone_surrogates_in_a_streamed_tool_call_become_replacement_characters(server):
    first = {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "to\ud800", "arguments": '{"a": '}}]}
    second = {"tool_calls": [{"index": 0, "function": {"arguments": '"b\udc00"}'}}]}
    server.answer = event_stream(chunk(first), chunk(second, finish_reason="tool_calls"))
    items = [item async for item in model().stream_turn([], tools=[])]
    (made,) = items[-1].value.tool_calls
    assert made.name == "to\ufffd" and json.loads(made.arguments) == {"a": "b\ufffd"}


async def test_streamed_tool_calls_that_share_an_index_but_not_an_id_stay_separate_calls(server):
    # Ollama numbers every streamed call 0: merged, two searches became one call of "grep_messagesgrep_messages"
    def call(call_id: str, pattern: str) -> str:
        function = {"name": "grep_messages", "arguments": json.dumps({"pattern": pattern})}
        return chunk({"tool_calls": [{"index": 0, "id": call_id, "function": function}]})

    server.answer = event_stream(call("c1", "bees"), call("c2", "honey"), chunk({}, finish_reason="tool_calls"))
    items = [item async for item in model().stream_turn([], tools=[])]
    made = items[-1].value.tool_calls
    assert [(c.id, c.name, json.loads(c.arguments)) for c in made] == [
        ("c1", "grep_messages", {"pattern": "bees"}),
        ("c2", "grep_messages", {"pattern": "honey"}),
    ]


NOT_A_STREAM = {
    "a whole completion, the server ignoring stream": completion({"role": "assistant", "content": "Paris"}),
    "a proxy's HTML page": (200, "text/html", b"<html>502 bad gateway</html>"),
    "chunks whose choices are not a list": event_stream('data: {"object": "chat.completion.chunk", "choices": 5}\n\n'),
}


@pytest.mark.parametrize("answer", NOT_A_STREAM.values(), ids=NOT_A_STREAM.keys())
async def test_a_stream_that_is_no_event_stream_is_an_error_not_an_empty_turn(server, answer):
    # taken as an empty turn, ChatStream answered "nothing in memory tells me that", status OK
    server.answer = answer
    with pytest.raises(ModelOutputInvalid, match="not a stream of chat completion chunks"):
        [item async for item in model().stream_turn([], tools=[])]


async def test_tool_calls_that_are_not_a_list_in_a_chunk_are_left_out(server):
    server.answer = event_stream(chunk({"content": "Paris", "tool_calls": 5}, finish_reason="stop"))
    items = [item async for item in model().stream_turn([], tools=[])]
    assert items[0] == "Paris" and items[-1].value.tool_calls == ()


async def test_a_turn_cut_at_max_tokens_says_so_streamed_or_not(server):
    cut = {"index": 0, "message": {"role": "assistant", "content": "The answer is"}, "finish_reason": "length"}
    server.answer = completion(choices=[cut])
    assert (await model().turn([], tools=[])).value.cut
    server.answer = event_stream(chunk({"content": "The answer is"}, finish_reason="length"))
    assert [item async for item in model().stream_turn([], tools=[])][-1].value.cut
    server.answer = event_stream(chunk({"content": "Paris."}, finish_reason="stop"))
    assert not [item async for item in model().stream_turn([], tools=[])][-1].value.cut


def test_a_reply_the_sdk_refuses_to_validate_is_model_output_invalid():
    response = httpx2.Response(200, text="[]", request=REQUEST)
    failed = as_model_error("deriver", 1, openai.APIResponseValidationError(response, body=[]))
    assert isinstance(failed, ModelOutputInvalid)


def test_a_refusal_quoting_a_nul_or_a_lone_surrogate_leaves_both_out_of_its_text():
    refused = ModelRequestRejected("deriver", 400, 'bad input "\x00" and "\ud800"')
    assert "\x00" not in str(refused) and "\ud800" not in str(refused)
    str(refused).encode()  # what a dead letter copies must be valid UTF-8


MALFORMED_VECTORS = {
    "a proxy's HTML page": (200, "text/html", b"<html/>"),
    "JSON that does not parse": (200, "application/json", b"{not json"),
    "no data": (200, "application/json", b'{"object": "list"}'),
    "a null vector": vectors(None),
    "a vector of text": vectors(["a", "b", "c", "d"]),
    "a vector of numbers as text": vectors(["1", "0", "0", "0"]),
    "NaN": (200, "application/json", b'{"data": [{"index": 0, "embedding": [NaN, 0, 0, 0]}]}'),
    "infinity": (200, "application/json", b'{"data": [{"index": 0, "embedding": [Infinity, 0, 0, 0]}]}'),
    "a value past float4's range": vectors([1e39, 0, 0, 0]),
    "the wrong size": vectors([1.0, 0.0]),
    "the wrong count": vectors(),
}


@pytest.mark.parametrize("answer", MALFORMED_VECTORS.values(), ids=MALFORMED_VECTORS.keys())
async def test_an_embedding_reply_without_usable_vectors_is_an_embedding_error(server, answer):
    server.answer = answer
    with pytest.raises(EmbeddingError):
        await embedder().embed(["text"])
    with pytest.raises(EmbeddingError):
        embedder().embed_sync(["text"])


async def test_integer_components_are_accepted_as_numbers(server):
    server.answer = vectors([1, 0, 0, 0])
    assert await embedder().embed(["text"]) == [[1.0, 0.0, 0.0, 0.0]]


async def test_vectors_a_server_did_not_scale_come_back_at_unit_length_so_dot_products_are_cosines(server):
    # the deriver compares facts by dot product: unscaled [3, 4, 0, 0] and [0, 4, 3, 0] (cosine 0.64) scored
    # 16 and an unrelated fact was merged into an old one as a duplicate
    server.answer = vectors([3, 4, 0, 0], [0, 0, 0, 0])
    assert await embedder().embed(["a", "b"]) == [[0.6, 0.8, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]


async def test_a_text_past_the_character_limit_is_cut_before_it_is_sent(server):
    server.answer = vectors([1.0, 0.0, 0.0, 0.0])
    await embedder(max_chars=10).embed(["x" * 50])
    assert server.requests[-1]["input"] == ["x" * 10]


def test_the_local_model_refuses_to_return_a_vector_that_is_not_finite(monkeypatch):
    local = LocalOnnxEmbedder(EmbeddingSettings())
    monkeypatch.setattr(local, "_load", lambda: None)
    monkeypatch.setattr(local, "_embed_batch", lambda texts: [[math.nan] * local.dimensions for _ in texts])
    with pytest.raises(EmbeddingError, match="NaN"):
        local.embed_sync(["text"])


def test_finite_vectors_pass():
    finite([[0.5, -1.0], [3.4e38, 0.0]], "m")


async def test_a_structured_reply_cut_at_max_tokens_is_refused_at_once_naming_the_setting_to_raise(server):
    # repaired, it was cut again at the same limit; dead-lettered, the batch failed the same way at every retry,
    # with an error that said only that the JSON did not parse
    from services.deriver.prompt import Extraction

    cut = '{"facts": [{"content": "Ada keeps bees", "message_id": "m1", "span": "I keep'
    message = {"role": "assistant", "content": cut}
    server.answer = completion(choices=[{"index": 0, "message": message, "finish_reason": "length"}])
    with pytest.raises(ModelOutputInvalid, match="stopped at max_tokens .1024.*PEERLOG_LLM_DERIVER_MAX_TOKENS"):
        await ModelClient("deriver", ModelStageSettings(base_url=BASE_URL, max_retries=0)).structured(
            [{"role": "user", "content": "facts?"}], Extraction
        )
    assert len(server.requests) == 1  # no repair: it would stop at the same limit


async def test_a_text_a_server_refuses_as_past_its_context_is_embedded_cut_shorter(server):
    # 2,000 characters of Chinese are some 2,000 tokens: a 512-token server refused it, and the search or
    # write answered INTERNAL
    def tei(body: dict):
        if any(len(text) > 300 for text in body["input"]):
            refusal = {"error": "Input validation error: `inputs` must have less than 512 tokens. Given: 900"}
            return 413 if len(body["input"][0]) > 1000 else 400, "application/json", json.dumps(refusal).encode()
        return vectors(*([1.0, 0.0, 0.0, 0.0] for _ in body["input"]))

    server.answer = tei
    assert await embedder().embed(["长城" * 450]) == [[1.0, 0.0, 0.0, 0.0]]
    assert [len(r["input"][0]) for r in server.requests] == [900, 450, 225]
    server.answer = (401, "application/json", b'{"error": "invalid api key"}')
    with pytest.raises(ModelRequestRejected):  # any other refusal stands
        await embedder().embed(["hi"])


def test_a_local_model_cut_past_its_512_positions_is_refused_at_start():
    with pytest.raises(ValueError, match="less than or equal to 512"):
        EmbeddingSettings(max_length=1024)
