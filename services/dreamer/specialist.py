"""One dream: the deduction then the induction specialist, each a tool loop of discovery and action.

Discovery uses the memory tools Chat offers too (scoped to the pair) plus `recent_observations`; actions go through
the pure edit core (edits.py). Nothing is written here: the events collect in the run and the caller
commits them with the request's offset in one transaction. No connection is held across a model call.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client import Counter
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.dreamer import edits, prompt
from services.dreamer.aliases import Aliases
from services.dreamer.edits import Action, Dream, DreamWrites, NamedObservation
from services.dreamer.ports import DreamReads
from services.events import Event, ObservationRejected, PeerCardUpdated, ProducerInfo
from services.llm.client import ModelClient, ToolCall
from services.llm.embeddings import Embedder
from services.llm.errors import ModelRequestRejected
from services.llm.tokens import count_tokens
from services.toolloop import memory
from services.toolloop.memory import ObservationLevel, RecallScope, Row, ToolEnv, observation_line
from services.toolloop.registry import bad_arguments, function_spec, parse_arguments
from services.toolloop.turns import StructuredStep, ToolRequest, step_schema

RECENT_OBSERVATIONS = "recent_observations"  # the dreamer's own discovery tool; the others are the memory tools
DISCOVERY = (
    RECENT_OBSERVATIONS,
    *(
        t.name
        for t in (memory.SEARCH_OBSERVATIONS, memory.SEARCH_MESSAGES, memory.SOURCE_MESSAGES, memory.REASONING_CHAIN)
    ),
)
ACTIONS: dict[str, dict[str, type[BaseModel]]] = {
    "deduction": {
        "add_deduction": edits.AddDeduction,
        "update_knowledge": edits.UpdateKnowledge,
        "add_contradiction": edits.AddContradiction,
        "remove_deduction": edits.RemoveDeduction,
        "set_peer_card": edits.SetPeerCard,
    },
    "induction": {"add_pattern": edits.AddPattern},
}
WRITES_TEXT = (edits.AddDeduction, edits.UpdateKnowledge, edits.AddContradiction, edits.AddPattern)
REJECTED = Counter(
    "peerlog_dream_rejected_writes_total",
    "Observation writes of a dream specialist the provenance rule refused",
    ["specialist"],
)
OPENING_OBSERVATIONS = 60
# a constant, as the model's context is in no setting: a quarter of the shipped local model's 4,096 tokens,
# where the deduction's system prompt and step schema take about 2,700. Sixty full observations were ~30,000
OPENING_TOKENS = 1_000
RESULT_CHARS = 6_000

log = logging.getLogger(__name__)


class RecentObservations(BaseModel):
    """The pair's most recent live observations, newest first."""

    model_config = ConfigDict(extra="forbid")
    levels: list[ObservationLevel] = Field(default_factory=list, description="only these levels")
    limit: int = Field(20, ge=1, le=50)


def newest_within(rows: Sequence[Row], budget: int, cost: Callable[[Row], int]) -> list[Row]:
    """The leading rows (newest first) whose costs together stay within `budget`."""
    kept, spent = [], 0
    for row in rows:
        spent += cost(row)
        if spent > budget:
            break
        kept.append(row)
    return kept


def actions_of(specialist: str, peer_card: bool = True) -> dict[str, type[BaseModel]]:
    """A specialist's actions; without the peer card where the configuration turns it off."""
    return {n: m for n, m in ACTIONS[specialist].items() if peer_card or m is not edits.SetPeerCard}


def tool_specs(specialist: str, peer_card: bool = True) -> list[dict[str, Any]]:
    """The function-tool specs a specialist is offered: discovery, then its own actions."""
    return [
        *memory.specs([n for n in DISCOVERY if n in memory.TOOLS]),
        function_spec(RECENT_OBSERVATIONS, RecentObservations),
        *(function_spec(n, m) for n, m in actions_of(specialist, peer_card).items()),
    ]


@dataclass
class DreamRun:
    """The state of one dream across both specialists: what it wrote and what the specialists were told."""

    dream: Dream
    reads: DreamReads
    embedder: Embedder
    pending: DreamWrites = field(default_factory=DreamWrites)
    events: list[Event] = field(default_factory=list)
    edits: int = 0
    written: list[str] = field(default_factory=list)  # lines for the next specialist's opening
    names: Aliases = field(default_factory=Aliases)  # short names of the observations shown
    card: tuple[str, ...] = ()  # the peer card's entries as the latest opening read them
    card_replaced: tuple[str, ...] | None = None  # the card the dream's card edit replaces, once it made one

    def scope(self) -> RecallScope:
        d = self.dream
        return RecallScope(d.workspace_id, d.observer_id, d.observed_id)

    async def specialist(self, name: str, model: ModelClient, rounds: int, calls_per_round: int) -> None:
        """Run one specialist until it stops (or its rounds run out), running at most `calls_per_round` of
        each turn's tool calls."""
        structured = model.settings.tool_mode == "structured"
        actions = actions_of(name, self.dream.peer_card)
        specs = tool_specs(name, self.dream.peer_card)
        producer = ProducerInfo(
            component="dreamer",
            version="0.1.0",
            model=model.settings.model,
            prompt_version=prompt.PROMPT_VERSIONS[name],
        )
        self.dream = replace(self.dream, producer=producer)
        system = prompt.system_prompt(
            name, self.dream.observer_id, self.dream.observed_id, specs if structured else (), self.dream.peer_card
        )
        messages = [{"role": "system", "content": system}, {"role": "user", "content": await self.opening(name)}]
        for used in range(rounds + 1):
            if used == rounds:
                messages.append({"role": "user", "content": prompt.FORCE_STOP})
            # narrowed each turn: the names a call may cite grow as the specialist is shown more
            offered = [self.names.narrowed(s) for s in specs] if used < rounds else None
            try:
                calls = await self.ask(model, messages, offered, structured, used)
            except ModelRequestRejected as error:
                if not error.too_long:
                    raise
                # the conversation outgrew the model's context: what was written is validated and stands, and
                # failing the dream would skip the next specialist and fail the same way after every cooldown
                log.warning("dream %s: %s ended, its prompt past the model's context", self.dream.dream_id, name)
                return
            if not calls or used == rounds:
                return
            for i, call in enumerate(calls):
                # bounded as Chat's turns are: one turn must not retire a whole store; the rest are told why
                ran = i < calls_per_round
                result = await self.run_tool(call, actions) if ran else prompt.NOT_RUN.format(most=calls_per_round)
                if structured:
                    messages.append({"role": "user", "content": f"Result of {call.name}:\n{result}"})
                else:
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})

    async def ask(self, model: ModelClient, messages: list, offered, structured: bool, used: int) -> list[ToolCall]:
        """The model's next turn as tool calls (empty: it stopped); the turn is appended to `messages`."""
        if structured:
            step = (
                await model.structured(messages, StructuredStep, name="dream_step", wire_schema=step_schema(offered))
            ).value.root
            messages.append({"role": "assistant", "content": step.model_dump_json()})
            if not isinstance(step, ToolRequest):  # done
                return []
            return [ToolCall(f"call_{used}", step.tool, json.dumps(step.arguments))]
        turn = (await model.turn(messages, offered)).value
        messages.append(
            {
                "role": "assistant",
                "content": turn.content or None,
                **(
                    {
                        "tool_calls": [
                            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                            for c in turn.tool_calls
                        ]
                    }
                    if turn.tool_calls
                    else {}
                ),
            }
        )
        return list(turn.tool_calls)

    async def opening(self, specialist: str) -> str:
        rows, card = await self.reads.opening(self.scope(), OPENING_OBSERVATIONS)
        self.card = tuple(card)
        # counted with the full ids, longer than the short names shown: the cap holds; only the kept get names
        shown = newest_within(rows, OPENING_TOKENS, lambda r: count_tokens(observation_line(r)))
        lines = [self.line(r) for r in reversed(shown)]
        return prompt.opening(specialist, lines, card, self.written)

    def line(self, row) -> str:
        return observation_line({**row, "observation_id": self.names.alias(row["observation_id"])})

    async def run_tool(self, call: ToolCall, actions: dict[str, type[BaseModel]]) -> str:
        try:
            arguments = self.names.unaliased(parse_arguments(call.arguments))
        except ValueError as error:
            return bad_arguments(call.name, error)
        call = replace(call, arguments=json.dumps(arguments))
        if call.name in actions:
            return await self.act(call, actions[call.name])
        if call.name == RECENT_OBSERVATIONS:
            return await self.recent(call)
        env = ToolEnv(self.reads, self.embedder, self.scope(), 25, RESULT_CHARS)
        result = await memory.execute(env, call, DISCOVERY)
        if not result.shown:  # no rows, so no observation's text: a "not found" may quote the id asked for
            return self.names.in_reply(result.text)
        return self.names.in_text(result.text, [i for i, kind in result.shown.items() if kind == "observation"])

    async def recent(self, call: ToolCall) -> str:
        try:
            args = RecentObservations.model_validate(parse_arguments(call.arguments))
        except (ValueError, ValidationError) as error:
            return bad_arguments(call.name, error)
        rows = await self.reads.newest_observations(self.scope(), args.levels, args.limit)
        text = "\n".join(map(self.line, rows)) or "No observations."
        # cut as every other tool's result: 50 rows of ~2,000 characters, re-sent with the history each round
        return text if len(text) <= RESULT_CHARS else text[:RESULT_CHARS] + "\n[truncated]"

    async def act(self, call: ToolCall, model: type[BaseModel]) -> str:
        try:
            action: Action = model.model_validate(parse_arguments(call.arguments))
        except (ValueError, ValidationError) as error:
            return bad_arguments(call.name, error)
        known = await self.known(edits.named_ids(action), getattr(action, "content", ""))
        vector, embedding_model = (), ""
        if isinstance(action, WRITES_TEXT):
            vector, embedding_model = (await self.embedder.embed([action.content]))[0], self.embedder.model_name
        outcome = edits.decide_edit(self.pending, known, action, self.dream, vector, embedding_model, self.card)
        self.pending, self.events = outcome.pending, [*self.events, *outcome.events]
        if any(isinstance(e, ObservationRejected) for e in outcome.events):
            REJECTED.labels(self.dream.producer.prompt_version.split("-")[0]).inc()
        if outcome.accepted:
            self.edits += 1
            if isinstance(action, edits.SetPeerCard):
                if self.card_replaced is None:
                    self.card_replaced = self.card
                self.card = tuple(action.entries)  # a second card edit replaces the first
            if isinstance(action, WRITES_TEXT):
                short = self.names.alias(outcome.events[0].observation_id)
                self.written.append(f"[obs:{short}] ({call.name}) {action.content}")
                return f"ok: written as {short}"
        return self.names.in_reply(outcome.reply)

    async def card_kept(self) -> None:
        """Drop the dream's card edit when the card changed since the dream read it: a client's SetPeerCard
        made while the dream ran would be overwritten by a card written from the older one."""
        if self.card_replaced is None:
            return
        _, now = await self.reads.opening(self.scope(), 0)
        if tuple(now) != self.card_replaced:
            kept = [e for e in self.events if not isinstance(e, PeerCardUpdated)]
            self.edits -= len(self.events) - len(kept)
            self.events = kept

    async def known(self, ids: Sequence[str], content: str = "") -> dict[str, NamedObservation]:
        """The observations `ids` name, and the pair's live and deleted ones that say `content`."""
        rows = await self.reads.named_observations(self.scope(), self.dream.derivation, ids, content)
        return {
            i: NamedObservation(
                r["observer_id"],
                r["observed_id"],
                r["level"],
                r["superseded_by"] is None and r["deleted_at"] is None,
                r["content"],
                r["derivation"],
                deleted=r["deleted_at"] is not None,
                premise_ids=tuple(r["premise_ids"]),
            )
            for i, r in rows.items()
        }
