"""The chat-model client every stage uses: structured (schema-validated), plain-text and tool-calling
completions, the last also streamed.

One retry policy (tenacity; the SDK's own retries are off), one repair attempt for invalid output,
and per-stage metrics. Works with any OpenAI-compatible server.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import openai
from opentelemetry.trace import Span, SpanKind
from pydantic import BaseModel, ValidationError

from services import tracing
from services.llm import formats, metrics
from services.llm.errors import ModelError, ModelOutputCut, ModelOutputInvalid, ModelUnavailable
from services.llm.http import async_http_client
from services.llm.retry import SERVER_ERRORS, as_model_error, call_async
from services.llm.settings import ModelStageSettings

V = TypeVar("V")
_MODEL_NAME_CHARS = 200  # a server's model name is stamped on events; a runaway one must not bloat them
# a reply's UTF-8 bytes per token of max_tokens, generously (a token is a few bytes): a longer reply is from a
# server that ignored max_tokens. Taken whole, a 5 MB answer reached Chat's caller as RESOURCE_EXHAUSTED
# "Received message larger than max", which reads as the caller's fault
_BYTES_PER_TOKEN = 16
_MOST_REPLY_BYTES = 1_000_000  # whatever max_tokens says: a Chat answer must fit gRPC's 4 MB messages
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Usage:
    """Tokens the server reported, summed over every reply a call needed."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)


@dataclass(frozen=True)
class Completion(Generic[V]):
    """A finished call: the parsed value, the raw text it came from, and what it cost.

    `attempts` counts model replies used (2 after a repair); transport retries are not counted.
    """

    value: V
    raw: str
    model: str
    usage: Usage
    attempts: int
    cut: bool = False  # the reply stopped at max_tokens (finish_reason "length"): a text may end mid-way
    # the messages the repair attempt sent (None: no repair), for a caller that budgets the prompts it sends
    repair: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asked for; `arguments` is the raw JSON text it wrote."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class AssistantTurn:
    """A reply that may carry text, tool calls, or both."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    cut: bool = False  # it stopped at max_tokens (finish_reason "length"): the text may end mid-way


@dataclass(frozen=True)
class _Reply:
    content: str
    model: str
    usage: Usage
    tool_calls: tuple[ToolCall, ...] = ()
    cut: bool = False  # it stopped at max_tokens (finish_reason "length")


class ModelClient:
    """Calls one stage's chat model."""

    def __init__(self, stage: str, settings: ModelStageSettings) -> None:
        self.stage = stage
        self.settings = settings
        self._openai = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key(),
            timeout=settings.timeout_s,
            max_retries=0,  # retries are ours (one policy, with metrics), not the SDK's
            http_client=async_http_client(),
        )

    async def structured(
        self,
        messages: list[dict[str, Any]],
        schema: type[M],
        *,
        name: str | None = None,
        wire_schema: Mapping[str, Any] | None = None,
    ) -> Completion[M]:
        """A reply validated as `schema`; one repair attempt, then ModelOutputInvalid.

        `wire_schema` is the JSON schema the server is asked for instead of `schema`'s own, when the caller
        knows a narrower one (e.g. this turn's tools); the reply is still validated as `schema`.
        """
        wire = wire_schema if wire_schema is not None else schema.model_json_schema()
        return await self._observed(self._structured(messages, schema, wire, formats.schema_name(schema, name)))

    async def text(self, messages: list[dict[str, Any]]) -> Completion[str]:
        """A plain-text reply."""
        return await self._observed(self._text(messages))

    async def turn(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> Completion[AssistantTurn]:
        """One assistant turn, offered `tools` (OpenAI function-tool specs; none: plain text only)."""
        return await self._observed(self._turn(messages, tools))

    async def stream_turn(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> AsyncIterator[str | Completion[AssistantTurn]]:
        """The turn's text pieces as they arrive, then the whole turn as a Completion.

        Only opening the stream is retried: once text has been handed on, a failure ends the call.
        """
        body = {**self._request_body(messages, None, tools), "stream": True, "stream_options": {"include_usage": True}}
        # not made current: a generator's context may not be detached where it was attached
        span = tracing.TRACER.start_span(
            f"model {self.stage}", kind=SpanKind.CLIENT, attributes=self._span_attributes()
        )
        try:
            stream = await call_async(
                self.stage, self.settings, lambda: self._openai.chat.completions.create(**body), self._count_retry
            )
            reply = _StreamedReply(self.settings.model)
            async for chunk in stream:
                pieces = reply.read(chunk)
                if reply.size > self._most_bytes:
                    await stream.close()  # read no further: the rest may be megabytes more
                    raise self._too_long(reply.text)
                for piece in pieces:
                    yield piece
            if not reply.chunks:  # a 200 that was no event stream (a server ignoring "stream", a proxy's page)
                # yields nothing: taken as an empty turn, it became "nothing in memory tells me that"
                raise ModelOutputInvalid(self.stage, "", "the server's reply is not a stream of chat completion chunks")
            if not reply.finished:
                raise self._ended_early()
        except SERVER_ERRORS as error:
            failure = as_model_error(self.stage, 1, error)
            metrics.record_call(self.stage, failure.outcome)
            _failed(span, failure)
            raise failure from error
        except ModelError as error:
            metrics.record_call(self.stage, error.outcome)
            _failed(span, error)
            raise
        finally:
            span.end()
        metrics.record_call(self.stage, "ok")
        metrics.record_tokens(self.stage, reply.usage.prompt_tokens, reply.usage.completion_tokens)
        turn = AssistantTurn(reply.text, reply.calls.merged(), reply.cut)
        yield Completion(turn, turn.content, reply.model, reply.usage, attempts=1)

    def _ended_early(self) -> ModelUnavailable:
        """A stream that ended before any choice said why it finished: a server that ends its body by closing
        the connection (no chunked encoding) was cut off mid-answer, and the SDK cannot tell that from an end.
        Unavailable, as a stream dropped mid-body is: taken as the answer, "Bob does not live in Oslo any more"
        came back as "Bob does not"."""
        return ModelUnavailable(self.stage, 1, StreamEndedEarly("the model's stream ended before it finished"))

    def _too_long(self, content: str) -> ModelOutputInvalid:
        """A reply longer than max_tokens allows (more than `_most_bytes` of text and tool calls): the server
        ignored max_tokens, and its reply may go on for megabytes."""
        max_tokens = self.settings.max_tokens
        why = f"the model's answer is longer than max_tokens ({max_tokens}) allows: over {self._most_bytes} bytes"
        return ModelOutputInvalid(self.stage, _raw(content), why)

    @property
    def _most_bytes(self) -> int:
        """The UTF-8 bytes of text and tool calls a reply within max_tokens may hold, generously."""
        return min(self.settings.max_tokens * _BYTES_PER_TOKEN, _MOST_REPLY_BYTES)

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._openai.close()

    async def __aenter__(self) -> ModelClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _observed(self, work: Any) -> Completion[Any]:
        with tracing.TRACER.start_as_current_span(
            f"model {self.stage}",
            kind=SpanKind.CLIENT,
            attributes=self._span_attributes(),
            **tracing.QUIET_FAILURES,
        ) as span:
            try:
                completion = await work
            except ModelError as error:
                metrics.record_call(self.stage, error.outcome)
                _failed(span, error)
                raise
            except Exception as error:
                _failed(span, error)
                raise
            metrics.record_call(self.stage, "ok" if completion.attempts == 1 else "repaired")
            span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": completion.usage.prompt_tokens,
                    "gen_ai.usage.output_tokens": completion.usage.completion_tokens,
                    "peerlog.llm.attempts": completion.attempts,
                }
            )
            return completion

    def _span_attributes(self) -> dict[str, str]:
        return {"peerlog.llm.stage": self.stage, "gen_ai.request.model": self.settings.model}

    async def _text(self, messages: list[dict[str, Any]]) -> Completion[str]:
        reply = await self._call(messages, None)
        return Completion(reply.content, reply.content, reply.model, reply.usage, attempts=1, cut=reply.cut)

    async def _turn(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Completion[Any]:
        reply = await self._call(messages, None, tools)
        turn = AssistantTurn(reply.content, reply.tool_calls, reply.cut)
        return Completion(turn, reply.content, reply.model, reply.usage, attempts=1)

    async def _structured(
        self, messages: list[dict[str, Any]], schema: type[M], wire: Mapping[str, Any], name: str
    ) -> Completion[M]:
        mode = self.settings.schema_mode
        if mode == "json_object":  # the server cannot enforce the schema, so the prompt must carry it
            messages = formats.with_instruction(messages, formats.schema_instruction(wire))
        response_format = formats.response_format(mode, wire, name)
        first = await self._call(messages, response_format)
        try:
            return self._completion(first, schema, first.usage, attempts=1)
        except ValidationError as error:
            if first.cut:  # a repair would stop at the same limit: say which setting to raise instead
                raise self.cut_off(first.content, formats.describe_error(error)) from error
            retry = formats.repair_messages(messages, first.content, formats.describe_error(error))
        second = await self._call(retry, response_format)
        try:
            return self._completion(second, schema, first.usage + second.usage, attempts=2, repair=retry)
        except ValidationError as error:
            if second.cut:
                raise self.cut_off(second.content, formats.describe_error(error)) from error
            raise ModelOutputInvalid(self.stage, second.content, formats.describe_error(error)) from error

    def cut_off(self, content: str, problem: str) -> ModelOutputCut:
        """A reply that stopped at max_tokens before it was whole (`problem`): asking again stops there again."""
        setting = f"PEERLOG_LLM_{self.stage.upper()}_MAX_TOKENS"
        why = (
            f"the reply stopped at max_tokens ({self.settings.max_tokens}) before it was whole; raise {setting} "
            f"(or PEERLOG_LLM_MAX_TOKENS): {problem}"
        )
        return ModelOutputCut(self.stage, content, why)

    @staticmethod
    def _completion(
        reply: _Reply, schema: type[M], usage: Usage, attempts: int, repair: list[dict[str, Any]] | None = None
    ) -> Completion[M]:
        value = formats.parse_reply(reply.content, schema)
        return Completion(value, reply.content, reply.model, usage, attempts, repair=repair)

    async def _call(
        self,
        messages: list[dict[str, Any]],
        response_format: dict[str, Any] | None,
        tools: list[dict[str, Any]] | None = None,
    ) -> _Reply:
        """One completion, retried on transient errors; raises ModelUnavailable or ModelRequestRejected."""
        body = self._request_body(messages, response_format, tools)
        return await call_async(self.stage, self.settings, lambda: self._request(body), self._count_retry)

    def _count_retry(self) -> None:
        metrics.record_retry(self.stage)

    def _request_body(
        self,
        messages: list[dict[str, Any]],
        response_format: dict[str, Any] | None,
        tools: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.settings.model,
            "messages": formats.normalise_messages(messages),
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
        }
        if response_format is not None:
            body["response_format"] = response_format
        if tools:
            body["tools"] = tools
        return body

    async def _request(self, body: dict[str, Any]) -> _Reply:
        started = time.perf_counter()
        try:
            response = await self._openai.chat.completions.create(**body)
        finally:
            metrics.LATENCY.labels(stage=self.stage).observe(time.perf_counter() - started)
        return self._reply(response)

    def _reply(self, response: Any) -> _Reply:
        """The reply read defensively: the SDK builds its objects without validating them, so a proxy's 200
        HTML page arrives as a str, `"message": null` as None, a number where text belongs as a number."""
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list):
            raise ModelOutputInvalid(self.stage, _raw(response), "the server's reply is not a chat completion")
        if not choices:
            raise ModelOutputInvalid(self.stage, _raw(response), "the server returned no choices")
        message = getattr(choices[0], "message", None)
        content = getattr(message, "content", None)
        if message is None or not isinstance(content, str | None):
            raise ModelOutputInvalid(self.stage, _raw(response), "the reply has no message, or its content is not text")
        usage = _usage(getattr(response, "usage", None))
        metrics.record_tokens(self.stage, usage.prompt_tokens, usage.completion_tokens)
        content = formats.valid_unicode(content or "")  # a tool-call-only reply has no text
        calls = _tool_calls(getattr(message, "tool_calls", None))
        if _utf8_bytes(content) + sum(_call_bytes(c.name, c.arguments) for c in calls) > self._most_bytes:
            raise self._too_long(content)
        cut = getattr(choices[0], "finish_reason", None) == "length"
        return _Reply(content, model_name(getattr(response, "model", None)) or self.settings.model, usage, calls, cut)


def _failed(span: Span, error: Exception) -> None:
    """Marks a model call's span failed with only what a caller may see: a model error's public text, else the
    error's kind (the text of either can quote what the provider's server sent back)."""
    tracing.failed(span, error.public if isinstance(error, ModelError) else type(error).__name__)


def _raw(response: Any) -> str:
    return str(response)[:2000]


def model_name(value: Any) -> str:
    """The model name a server reported, as text events can carry (it is stamped on them), or "" for none."""
    if value is None or isinstance(value, dict | list):
        return ""
    return formats.storable(str(value))[:_MODEL_NAME_CHARS]


def _token_count(value: Any) -> int:
    """A token count as reported; anything but a whole number (a server's "many", null, -1) counts 0."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _usage(usage: Any) -> Usage:
    return Usage(_token_count(getattr(usage, "prompt_tokens", 0)), _token_count(getattr(usage, "completion_tokens", 0)))


def _text(value: Any) -> str:
    """A tool call's name or arguments as valid text: some servers send arguments as an object."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    # a lone surrogate would reach a tool's input, then an event Kafka's serialiser refuses
    return formats.valid_unicode(text)


def _tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    if not isinstance(raw, list):
        return ()
    calls = []
    for i, call in enumerate(raw):
        function = getattr(call, "function", None)
        if function is None:
            continue
        call_id = getattr(call, "id", None)
        calls.append(
            ToolCall(
                _text(call_id) if isinstance(call_id, str) and call_id else f"call_{i}",
                _text(getattr(function, "name", None)),
                _text(getattr(function, "arguments", None)),
            )
        )
    return tuple(calls)


def _streamed_text(choice: Any, calls: _StreamedCalls) -> Iterator[str]:
    """A streamed choice's text piece, its tool-call pieces merged into `calls`; read as loosely as a whole
    reply is: a server may send a choice that is null or has no delta, or a number where a list belongs."""
    delta = getattr(choice, "delta", None)
    if delta is None:
        return
    content = getattr(delta, "content", None)
    if isinstance(content, str) and content:
        yield formats.valid_unicode(content)
    pieces = getattr(delta, "tool_calls", None)
    for call in pieces if isinstance(pieces, list) else ():
        if call is not None:
            calls.add(call)


class _StreamedCalls:
    """Streamed tool calls, which arrive in pieces keyed by index: the id and name once, the arguments in
    parts. Some servers (Ollama) number every call 0 and tell them apart only by id: a new id at an index
    starts a new call, where merged, two searches became one call of "grep_messagesgrep_messages"."""

    def __init__(self) -> None:
        self._calls: list[dict[str, str]] = []
        self._at: dict[int, int] = {}  # index -> the position in _calls of the latest call sent under it
        self.size = 0  # UTF-8 bytes of their names and arguments

    def add(self, delta: Any) -> None:
        index = getattr(delta, "index", None)
        index = index if isinstance(index, int) else 0  # a server that numbers nothing sends one call
        call_id = getattr(delta, "id", None)
        call_id = call_id if isinstance(call_id, str) and call_id else ""
        at = self._at.get(index)
        if at is None or (call_id and self._calls[at]["id"] and self._calls[at]["id"] != call_id):
            self._at[index] = at = len(self._calls)
            self._calls.append({"id": "", "name": "", "arguments": ""})
        call = self._calls[at]
        call["id"] = call_id or call["id"]
        function = getattr(delta, "function", None)
        if function is not None:
            name, arguments = _piece(getattr(function, "name", None)), _piece(getattr(function, "arguments", None))
            call["name"] += name
            call["arguments"] += arguments
            self.size += _call_bytes(name, arguments)

    def merged(self) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall(_text(c["id"] or f"call_{i}"), _text(c["name"]), _text(c["arguments"]))
            for i, c in enumerate(self._calls)
        )


def _piece(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _utf8_bytes(text: str) -> int:
    """`text`'s length in UTF-8 (a lone surrogate, not yet replaced, counts the 3 bytes of its U+FFFD)."""
    return len(text.encode(errors="surrogatepass"))


def _call_bytes(name: str, arguments: str) -> int:
    return _utf8_bytes(name) + _utf8_bytes(arguments)


class StreamEndedEarly(ConnectionError):
    """A model's event stream ended before any choice carried a finish_reason (see `_ended_early`)."""


class _StreamedReply:
    """A streamed reply as its chunks arrive: the text, tool calls, usage and model name, and whether a choice
    said why it finished."""

    def __init__(self, model: str) -> None:
        self.model, self.usage, self.chunks = model, Usage(), 0
        self.calls = _StreamedCalls()
        self.finished = False  # a choice carried a finish_reason (stop, length, tool_calls, …)
        self.cut = False  # it stopped at max_tokens (finish_reason "length"): the text may end mid-way
        self._pieces: list[str] = []
        self._text_bytes = 0

    def read(self, chunk: Any) -> list[str]:
        """Takes in one chunk; returns its text pieces."""
        if not isinstance(getattr(chunk, "choices", None), list):
            return []  # not a chat completion chunk: a server's error object, or whatever a proxy sent
        self.chunks += 1
        self.model = model_name(getattr(chunk, "model", None)) or self.model
        if getattr(chunk, "usage", None) is not None:
            self.usage = _usage(chunk.usage)
        pieces = []
        for choice in chunk.choices:
            reason = getattr(choice, "finish_reason", None)
            self.finished = self.finished or reason not in (None, "")
            self.cut = self.cut or reason == "length"
            pieces.extend(_streamed_text(choice, self.calls))
        self._pieces += pieces
        self._text_bytes += sum(map(_utf8_bytes, pieces))
        return pieces

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    @property
    def size(self) -> int:
        """UTF-8 bytes of text and tool calls so far."""
        return self._text_bytes + self.calls.size
