"""The pure core of Chat: what to do after each model turn, which citations stand, when to abstain.

No I/O: the shell (loop.py) feeds in the model's turns and token counts and carries out the decision.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from services.llm.client import ToolCall
from services.toolloop.registry import Kind

MARKER = re.compile(r"\[(obs|msg):([A-Za-z0-9_-]{1,512})\]")
_KIND_OF_TAG = {"obs": "observation", "msg": "message"}

ABSTAIN_ANSWER = "I don't know: nothing in memory tells me that."


@dataclass(frozen=True)
class Limits:
    tool_rounds: int
    token_budget: int  # prompt tokens over all model calls of one Chat
    result_tokens: int  # what one tool result may add to the conversation, at most
    # calls run per round, at most: a turn may ask for any number at once (a stored message can ask the
    # model for sixty searches), and each costs reads; the round's room (round_room) bounds their text
    calls_per_round: int = 16
    # prompt tokens a call sends beside its messages (the offered tool specs, or a schema the client writes
    # into the prompt): with the tools offered, and without; the budget counts them as sent
    offer_tokens: int = 0
    plain_tokens: int = 0


CHARS_PER_TOKEN = 3  # a tool result's characters per token, as the budget counts them (few real texts have fewer)


@dataclass(frozen=True)
class ModelTurn:
    """The model's latest turn, whatever the tool mode: text and/or tool calls, and ids it declared it cites."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    cited: tuple[str, ...] = ()
    cut: bool = False  # it stopped at max_tokens: the text may end mid-way


@dataclass(frozen=True)
class LoopState:
    rounds: int = 0  # tool rounds carried out
    spent_tokens: int = 0  # prompt tokens of the model calls made so far
    shown: Mapping[str, Kind] = field(default_factory=dict)  # every id the model has been shown, by kind
    forced: bool = False  # the model was told to answer now; its next turn is the answer

    def called(self, prompt_tokens: int) -> LoopState:
        return replace(self, spent_tokens=self.spent_tokens + prompt_tokens)

    def showed(self, ids: Mapping[str, Kind]) -> LoopState:
        return replace(self, shown={**self.shown, **ids})

    def next_round(self) -> LoopState:
        return replace(self, rounds=self.rounds + 1)

    def force(self) -> LoopState:
        return replace(self, forced=True)


@dataclass(frozen=True)
class CallTools:
    calls: tuple[ToolCall, ...]  # the first limits.calls_per_round of the turn's calls
    dropped: int = 0  # the turn's calls beyond those, not run
    room: int = 0  # tokens their results may add together (round_room)


@dataclass(frozen=True)
class Finish:
    text: str
    cited: tuple[str, ...]


ForceReason = Literal["round_cap", "token_budget"]


@dataclass(frozen=True)
class ForceAnswer:
    reason: ForceReason


Decision = CallTools | Finish | ForceAnswer


def call_tokens(limits: Limits, conversation_tokens: int, offers_tools: bool) -> int:
    """A model call's prompt tokens: its conversation and what it sends beside it."""
    return conversation_tokens + (limits.offer_tokens if offers_tools else limits.plain_tokens)


def withheld(state: LoopState, limits: Limits, conversation_tokens: int) -> ForceReason | None:
    """Why the next call may not offer tools, if it may not: no rounds left, or no room for another
    round plus the final answer."""
    if state.rounds >= limits.tool_rounds:
        return "round_cap"
    # room for the next call, offering the tools, and the answer after it: a result more, no tools
    beside = limits.offer_tokens + limits.plain_tokens
    if state.spent_tokens + 2 * (conversation_tokens + limits.result_tokens) + beside > limits.token_budget:
        return "token_budget"
    return None


def may_use_tools(state: LoopState, limits: Limits, conversation_tokens: int) -> bool:
    """Whether the next call may offer tools."""
    return not state.forced and withheld(state, limits, conversation_tokens) is None


def decide(state: LoopState, turn: ModelTurn, limits: Limits, conversation_tokens: int) -> Decision:
    """After a turn: run its tools, accept its answer, or make the model answer without tools.

    A turn after ForceAnswer is the answer even if it asks for tools again, so the loop always ends.
    """
    if not turn.tool_calls or state.forced:
        return Finish(turn.text, turn.cited)
    reason = withheld(state, limits, conversation_tokens)
    if reason is not None:
        return ForceAnswer(reason)
    run = turn.tool_calls[: limits.calls_per_round]
    return CallTools(run, len(turn.tool_calls) - len(run), round_room(state, limits, conversation_tokens))


def round_room(state: LoopState, limits: Limits, conversation_tokens: int) -> int:
    """Tokens one round's tool results may add together: what leaves room in the budget for the next call
    and the answer's, both of which carry them; never less than one result (`withheld` saw to that)."""
    left = limits.token_budget - state.spent_tokens - limits.offer_tokens - limits.plain_tokens
    return max(limits.result_tokens, left // 2 - conversation_tokens)


@dataclass(frozen=True)
class Citations:
    observation_ids: tuple[str, ...] = ()
    message_ids: tuple[str, ...] = ()


def cited_ids(text: str, declared: Iterable[str], shown: Mapping[str, Kind]) -> Citations:
    """Ids the answer cites ([obs:ID]/[msg:ID] markers, then declared ones) that the model was shown.

    Invented ids are dropped; each id counts once, in order of first mention.
    """
    wanted = [m.group(2) for m in MARKER.finditer(text)] + list(declared)
    kept = list(dict.fromkeys(i for i in wanted if i in shown))
    return Citations(
        tuple(i for i in kept if shown[i] == "observation"), tuple(i for i in kept if shown[i] == "message")
    )


def drop_invented_markers(text: str, shown: Mapping[str, Kind]) -> str:
    """The text without citation markers whose id the model was never shown (or of the wrong kind)."""

    def keep(match: re.Match[str]) -> str:
        return match.group(0) if shown.get(match.group(2)) == _KIND_OF_TAG[match.group(1)] else ""

    return MARKER.sub(keep, text)


@dataclass(frozen=True)
class Answer:
    text: str
    citations: Citations
    abstained: bool


def final_answer(text: str, declared: Iterable[str], shown: Mapping[str, Kind], free_text: bool) -> Answer:
    """The answer as returned. Abstention rule: with no evidence shown at all, a free-text answer is
    replaced by ABSTAIN_ANSWER (whatever the model claimed); a JSON answer keeps its shape but cites nothing.
    An empty free-text answer is an abstention too.
    """
    if not shown or (free_text and not text.strip()):
        return Answer(ABSTAIN_ANSWER if free_text else text, Citations(), abstained=True)
    clean = drop_invented_markers(text, shown).strip() if free_text else text
    return Answer(clean, cited_ids(text, declared, shown), abstained=False)


def should_short_circuit(evidence_found: bool, wants_json: bool) -> bool:
    """No model call at all: nothing about the pair exists, and the answer need not fit a schema."""
    return not evidence_found and not wants_json
