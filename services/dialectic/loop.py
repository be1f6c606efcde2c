"""The thin shell of Chat: prefetch, then the tool loop the policy decides, then the checked answer.

Reads go through short-lived connections; no connection is open while a model is called.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, tzinfo
from typing import Any

from pydantic import ValidationError

from services.dialectic import policy, prompt, response_format
from services.dialectic.policy import CallTools, Finish, ForceAnswer, Limits, LoopState, ModelTurn
from services.dialectic.ports import ChatReads
from services.dialectic.settings import DialecticSettings, LevelPolicy
from services.errors import DeadlineExceeded
from services.events import prompt_addition
from services.llm import formats
from services.llm.client import AssistantTurn, Completion, ModelClient, ToolCall
from services.llm.embeddings import Embedder
from services.llm.errors import ModelOutputInvalid
from services.llm.rerank import Reranker
from services.llm.tokens import count_tokens
from services.toolloop.memory import (
    SEARCH_MESSAGES,
    SEARCH_OBSERVATIONS,
    TOOLS,
    RecallScope,
    ToolEnv,
    called,
    execute,
    specs,
)
from services.toolloop.registry import ToolResult
from services.toolloop.turns import StructuredAnswer, StructuredReply, ToolRequest, structured_turn_schema

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatRequest:
    workspace_id: str
    observer_id: str
    target_id: str
    query: str
    session_id: str = ""
    level: str = "low"
    response_schema: Mapping[str, Any] | None = None  # a JSON schema the answer must satisfy
    instructions: str = ""  # the configured dialectic instructions (the API resolves the levels)
    as_of: datetime | None = None  # answer from memory as it stood then (None: now)
    scope_id: str = ""  # a scope bounding recall (the API resolves it into `sessions`)
    sessions: tuple[str, ...] | None = None  # recall only these sessions (None: every one the observer saw)
    perspective_id: str = ""  # read the messages this peer saw instead of the observer's
    zone: tzinfo = UTC  # the asker's, for time words in its tools' searches
    narrow: bool = False  # the asker's token sees less than the workspace (RecallScope.narrow)


@dataclass(frozen=True)
class ChatResult:
    answer: str  # text, or JSON text when a schema was given
    observation_ids: tuple[str, ...]
    message_ids: tuple[str, ...]
    tool_rounds: int
    model: str  # empty when no model was called (abstained at once)
    abstained: bool


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ToolUsed:
    round: int
    name: str
    arguments: str
    hits: int


@dataclass(frozen=True)
class DiscardText:
    """The text streamed since the last other event is not the answer (thinking aloud before a tool call,
    or an answer corrected after it was streamed)."""


ChatEvent = TextDelta | ToolUsed | DiscardText | ChatResult


def conversation_tokens(messages: list[dict[str, Any]]) -> int:
    return count_tokens(json.dumps(messages, ensure_ascii=False, default=str))


def _tool_message(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


SEARCH_TOOLS = (SEARCH_OBSERVATIONS.name, SEARCH_MESSAGES.name)  # all a search-only level (minimal) offers
MIN_RESULT_TOKENS = 150  # a call whose round has less room left is not run
HISTORY_MESSAGES = 200  # the session's newest messages read before the history's token cap is applied


@dataclass(frozen=True)
class Prefetched:
    explicit: list
    derived: list
    history: list
    evidence: bool
    names: Mapping[str, str]  # display names of the observer and the target, by id


class Dialectic:
    """Answers questions about peers; one model client per reasoning level."""

    def __init__(
        self,
        reads: ChatReads,
        embedder: Embedder,
        settings: DialecticSettings,
        models: Mapping[str, ModelClient],
        reranker: Reranker | None = None,  # the message-search tools re-rank with it
    ) -> None:
        self.reads, self.embedder, self.settings, self.models = reads, embedder, settings, models
        self.reranker = reranker

    async def chat(self, request: ChatRequest, deadline_s: float | None = None) -> ChatResult:
        """The whole answer at once."""
        async for event in self.events(request, deadline_s, stream=False):
            if isinstance(event, ChatResult):
                return event
        raise AssertionError("unreachable: events() ends with a ChatResult")

    async def events(
        self, request: ChatRequest, deadline_s: float | None = None, stream: bool = True
    ) -> AsyncIterator[ChatEvent]:
        """Tool progress and the answer's text as it is generated, ending with the ChatResult."""
        limit = min(self.settings.deadline_s, deadline_s if deadline_s is not None else math.inf)
        try:
            async with asyncio.timeout(limit):
                async for event in _Run(self, request, stream).events():
                    yield event
        except TimeoutError:
            raise DeadlineExceeded(f"Chat did not finish within {limit:.1f} s; nothing was written") from None


class _Run:
    """One Chat call's loop; its state lives in `state`, its decisions in policy."""

    def __init__(self, owner: Dialectic, request: ChatRequest, stream: bool) -> None:
        self.owner, self.request, self.stream = owner, request, stream
        self.level: LevelPolicy = owner.settings.level(request.level)
        self.model = owner.models[request.level]
        self.structured = self.model.settings.tool_mode == "structured"
        self.scope = RecallScope(
            request.workspace_id,
            request.observer_id,
            request.target_id,
            request.session_id,
            request.as_of,
            request.sessions,
            request.perspective_id,
            request.zone,
            request.narrow,
        )
        settings = owner.settings
        self.env = ToolEnv(
            owner.reads,
            owner.embedder,
            self.scope,
            settings.tool_result_limit,
            settings.tool_result_chars,
            owner.reranker,
        )
        self.tools = SEARCH_TOOLS if self.level.search_only else tuple(TOOLS)
        self.limits = Limits(
            self.level.tool_rounds,
            settings.token_budget,
            settings.tool_result_chars // policy.CHARS_PER_TOKEN,
            offer_tokens=self.beside_messages(specs(self.tools)),
            plain_tokens=self.beside_messages(None),
        )
        self.state = LoopState()
        self.model_name = ""

    def beside_messages(self, tools: list[dict[str, Any]] | None) -> int:
        """Prompt tokens a call offered `tools` sends beside its messages: the tool specs, or in structured
        mode the turn's schema when the client writes it into the prompt (schema_mode json_object)."""
        if not self.structured:
            return count_tokens(json.dumps(tools)) if tools else 0
        if self.model.settings.schema_mode != "json_object":
            return 0  # the schema goes in response_format, not the prompt
        wire = structured_turn_schema(tools, free_text=self.request.response_schema is None)
        return count_tokens(json.dumps(formats.schema_instruction(wire)))

    async def prefetch(self) -> Prefetched:
        n = self.level.prefetch
        vector = (await self.owner.embedder.embed([self.request.query]))[0]
        found = await self.owner.reads.evidence(self.scope, vector, n, HISTORY_MESSAGES)
        return Prefetched(
            list(found.explicit), list(found.derived), self._capped(found.history), found.found, found.names
        )

    def _capped(self, newest_first) -> list:
        kept, used = [], 0
        for row in newest_first:
            used += count_tokens(prompt.message_line(row))
            if used > self.owner.settings.history_tokens:
                break
            kept.append(row)
        return kept[::-1]

    def opening(self, pre: Prefetched) -> list[dict[str, Any]]:
        r = self.request
        if self.structured:
            tools_text = prompt.structured_instruction(specs(self.tools) if self.limits.tool_rounds else [])
        else:
            tools_text = prompt.TOOLS_NATIVE if self.limits.tool_rounds else prompt.TOOLS_NONE
        system = prompt.system_prompt(*(called(p, pre.names.get(p)) for p in (r.observer_id, r.target_id)), tools_text)
        system += prompt_addition(r.instructions)
        if r.response_schema is not None:
            system += "\n\n" + prompt.json_answer_instruction(r.response_schema)
        when = prompt.asked_at(datetime.now(UTC), r.zone, r.as_of)
        user = prompt.user_prompt(r.query, pre.explicit, pre.derived, pre.history, when)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    async def events(self) -> AsyncIterator[ChatEvent]:
        pre = await self.prefetch()
        wants_json = self.request.response_schema is not None
        if policy.should_short_circuit(pre.evidence, wants_json):
            yield TextDelta(policy.ABSTAIN_ANSWER)
            yield ChatResult(policy.ABSTAIN_ANSWER, (), (), 0, "", abstained=True)
            return
        self.state = self.state.showed(
            {
                **{o["observation_id"]: "observation" for o in (*pre.explicit, *pre.derived)},
                **{m["message_id"]: "message" for m in pre.history},
            }
        )
        messages = self.opening(pre)
        streams_text = self.stream and not self.structured and not wants_json
        while True:
            tokens = self.withdraw_tools(messages)
            offered = specs(self.tools) if policy.may_use_tools(self.state, self.limits, tokens) else None
            turn, streamed = None, False
            async for item in self.ask(messages, offered, streams_text):
                if isinstance(item, ModelTurn):
                    turn = item
                else:
                    streamed = True
                    yield TextDelta(item)
            self.state = self.state.called(policy.call_tokens(self.limits, tokens, offered is not None))
            decision = policy.decide(self.state, turn, self.limits, tokens)
            if streamed and not isinstance(decision, Finish):
                yield DiscardText()
            if isinstance(decision, Finish):
                answer = await self.finish(messages, decision, turn)
                sent = turn.text if streamed else ""
                if self.stream and answer.text != sent.strip():  # checked or corrected after streaming: resend
                    if sent:
                        yield DiscardText()
                    yield TextDelta(answer.text)
                yield ChatResult(
                    answer.text,
                    answer.citations.observation_ids,
                    answer.citations.message_ids,
                    self.state.rounds,
                    self.model_name,
                    answer.abstained,
                )
                return
            if isinstance(decision, ForceAnswer):
                messages.append({"role": "user", "content": prompt.FORCE[decision.reason]})
                self.state = self.state.force()
                continue
            async for event in self.use_tools(messages, turn, decision):
                yield event

    def withdraw_tools(self, messages: list[dict[str, Any]]) -> int:
        """Tell the model to answer now once tools it has been using are withdrawn; the conversation's tokens."""
        tokens = conversation_tokens(messages)
        reason = policy.withheld(self.state, self.limits, tokens)
        if reason is not None and self.state.rounds > 0 and not self.state.forced:
            messages.append({"role": "user", "content": prompt.FORCE[reason]})
            self.state = self.state.force()
            tokens = conversation_tokens(messages)
        return tokens

    async def ask(self, messages, tools, streams_text: bool) -> AsyncIterator[str | ModelTurn]:
        """The model's next turn (streamed text pieces first, when asked to stream)."""
        if self.structured:
            wire = structured_turn_schema(tools, free_text=self.request.response_schema is None)
            # with its tools withdrawn only an answer will do: a tool request is repaired like any invalid turn
            # (taken as the answer, its empty text read as "nothing in memory tells me that")
            shape = StructuredReply if tools else StructuredAnswer
            done = await self.model.structured(messages, shape, name="dialectic_turn", wire_schema=wire)
            self.model_name = done.model
            if done.repair is not None:  # it re-sent the whole conversation (events() counts the first attempt)
                self.state = self.state.called(conversation_tokens(done.repair))
            yield self._structured_turn(done.value.root)
            return
        if not streams_text:
            completion = await self.model.turn(messages, tools)
        else:
            completion = None
            async for item in self.model.stream_turn(messages, tools):
                if isinstance(item, Completion):
                    completion = item
                else:
                    yield item
        self.model_name = completion.model
        value: AssistantTurn = completion.value
        yield ModelTurn(value.content, value.tool_calls, cut=value.cut)

    def _structured_turn(self, reply) -> ModelTurn:
        if isinstance(reply, ToolRequest):
            return ModelTurn("", (ToolCall(f"call_{self.state.rounds}", reply.tool, json.dumps(reply.arguments)),))
        return ModelTurn(
            answer_text(reply.answer, self.request.response_schema is not None), (), tuple(reply.cited_ids)
        )

    async def use_tools(self, messages, turn: ModelTurn, decision: CallTools) -> AsyncIterator[ToolUsed]:
        self.state = self.state.next_round()
        if self.structured:
            call = decision.calls[0]
            messages.append(
                {
                    "role": "assistant",
                    "content": json.dumps({"tool": call.name, "arguments": json.loads(call.arguments)}),
                }
            )
        else:
            messages.append(
                {
                    "role": "assistant",
                    "content": turn.text or None,
                    "tool_calls": [_tool_message(c) for c in decision.calls],
                }
            )
        left = decision.room  # tokens: the round's room, shared by its calls in turn
        for i, call in enumerate(decision.calls):
            result = await self.run_within(call, left)
            left -= count_tokens(result.text)
            self.state = self.state.showed(result.shown)
            text = result.text
            if decision.dropped and i == len(decision.calls) - 1:
                text += prompt.CALLS_DROPPED.format(dropped=decision.dropped, most=len(decision.calls))
            if self.structured:
                messages.append({"role": "user", "content": f"Result of {call.name}:\n{text}"})
            else:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
            yield ToolUsed(self.state.rounds, call.name, call.arguments, result.hits)

    async def run_within(self, call: ToolCall, tokens: int) -> ToolResult:
        """Run `call` with its result cut to `tokens` (never run when fewer than MIN_RESULT_TOKENS are left).
        Cut by characters first, then further while dense text (few characters a token) still counts over."""
        if tokens < MIN_RESULT_TOKENS:
            return ToolResult(prompt.NO_ROOM, {}, 0)
        env = replace(self.env, max_chars=min(self.env.max_chars, tokens * policy.CHARS_PER_TOKEN))
        result = await execute(env, call, self.tools)
        text, n = result.text, count_tokens(result.text)
        while n > tokens:
            text = text[: len(text) * tokens // n - 1]
            n = count_tokens(text)
        return ToolResult(text, {i: k for i, k in result.shown.items() if i in text}, result.hits)

    async def finish(self, messages, decision: Finish, turn: ModelTurn) -> policy.Answer:
        if turn.tool_calls and not decision.text.strip():  # a server sent calls though none were offered
            names = ", ".join(sorted({c.name for c in turn.tool_calls}))
            raise ModelOutputInvalid(
                self.model.stage,
                "",
                f"the model asked for tools ({names}) after they were withdrawn and gave no answer",
            )
        schema = self.request.response_schema
        text = decision.text
        if schema is not None:
            text = await self.checked_json(messages, text, schema, turn.cut)
        elif turn.cut and not text.strip():
            # read as an abstention it told the user memory holds nothing, though its evidence was in the prompt
            # (a reasoning model can spend all of max_tokens thinking)
            raise self.model.cut_off(text, "the reply held no answer text")
        elif turn.cut:
            log.warning("Chat's answer stopped at max_tokens (%s); raise its MAX_TOKENS setting", self.model.stage)
        return policy.final_answer(text, decision.cited, self.state.shown, free_text=schema is None)

    async def checked_json(self, messages, text: str, schema: Mapping[str, Any], cut: bool = False) -> str:
        """The answer as canonical JSON valid for `schema`, after at most one repair; else ModelOutputInvalid.
        No repair for an answer cut at max_tokens: it would stop at the same limit."""
        error = await _schema_error(text, schema)
        if error is None:
            return _canonical(text)
        if cut:
            raise self.model.cut_off(text, error)
        retry = [
            *messages,
            {"role": "assistant", "content": text},
            {"role": "user", "content": prompt.REPAIR.format(error=error)},
        ]
        self.state = self.state.called(conversation_tokens(retry))  # the budget counts repairs as sent
        repaired = await self.model.turn(retry, None)
        self.model_name = repaired.model
        content = repaired.value.content
        again = await _schema_error(content, schema)
        if again is not None and self.structured and (inner := unwrapped(content)) is not None:
            # the system prompt of structured mode asks for {"answer", "cited_ids"}: a model may keep to it
            if await _schema_error(inner, schema) is None:
                content, again = inner, None
        if again is not None:
            raise ModelOutputInvalid(
                self.model.stage, content, f"the answer does not match response_format after one repair: {again}"
            )
        return _canonical(content)


def answer_text(answer: Any, as_json: bool) -> str:
    """A structured turn's answer as the loop's text. Under a response_format it is JSON text: a string
    answer is taken as that text when it parses, else as a JSON string value (a schema of type string)."""
    if isinstance(answer, str):
        if not as_json:
            return answer
        try:
            json.loads(answer)
            return answer
        except (ValueError, RecursionError):
            pass
    return json.dumps(answer)


def unwrapped(text: str) -> str | None:
    """The answer of a structured final turn written as text (`{"answer": …, "cited_ids": …}`), as JSON
    text; None when `text` is not one."""
    try:
        reply = formats.parse_reply(text, StructuredReply).root
    except ValidationError:
        return None
    return None if isinstance(reply, ToolRequest) else answer_text(reply.answer, as_json=True)


async def _schema_error(text: str, schema: Mapping[str, Any]) -> str | None:
    try:
        value = response_format.loads_answer(formats.strip_fences(text))
        dumped = json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError) as error:
        return f"not JSON: {error}"
    if formats.valid_unicode(dumped) != dumped:  # protobuf could not send it
        return "not valid Unicode: a \\ud800-\\udfff escape without its pair"
    # validation can be CPU-heavy (the caller wrote the schema): keep the event loop free
    problems = await response_format.problems_in(schema, value)
    return "\n".join(problems)[:2000] or None


def _canonical(text: str) -> str:
    value = response_format.loads_answer(formats.strip_fences(text))
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
