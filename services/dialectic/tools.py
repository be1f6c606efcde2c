"""Chat's tools: one pydantic input model each (its JSON schema is the tool's parameters), one registry.

Executors read the projections through a fresh connection per call (never one held across a model call)
and only within scope: the (observer, target) pair's store, and messages the observer could see.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncEngine

from projections import dialectic_reads as reads
from projections import queries, store_queries
from projections.message_search import MessageSearch, search_messages, search_text
from services.dialectic.policy import Kind
from services.dialectic.prompt import message_line, observation_line
from services.llm.client import ToolCall
from services.llm.embeddings import Embedder

ObservationLevel = Literal["explicit", "deductive", "inductive", "contradiction"]
DERIVED_LEVELS = ("deductive", "inductive", "contradiction")


@dataclass(frozen=True)
class RecallScope:
    workspace_id: str
    observer_id: str
    target_id: str
    session_id: str = ""
    as_of: datetime | None = None  # memory as it stood then: observations and messages recorded by then
    sessions: tuple[str, ...] | None = None  # a scope's sessions: recall only these (None: no bound)

    def pair(self, levels: Sequence[str] = (), include_superseded: bool = False) -> store_queries.ObservationFilter:
        return store_queries.ObservationFilter(self.workspace_id, self.observer_id, self.target_id, tuple(levels),
                                         include_superseded=include_superseded, as_of=self.as_of,
                                         allowed_sessions=self.sessions)

    def within(self, session_ids: Sequence[str]) -> tuple[str, ...] | None:
        """A message filter's sessions, narrowed to the scope's; () when nothing is left to search."""
        if self.sessions is None:
            return tuple(session_ids)
        return tuple(s for s in session_ids if s in self.sessions) if session_ids else self.sessions

    def before(self, before: datetime | None) -> datetime | None:
        """A message window's upper bound, never past `as_of` (a message sent at or after it did not exist then)."""
        bounds = [b for b in (before, self.as_of) if b is not None]
        return min(bounds) if bounds else None


@dataclass(frozen=True)
class ToolEnv:
    engine: AsyncEngine
    embedder: Embedder
    scope: RecallScope
    max_rows: int
    max_chars: int


@dataclass(frozen=True)
class ToolResult:
    """What the model is shown, the ids in it, and how many rows it found."""

    text: str
    shown: Mapping[str, Kind]
    hits: int


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]  # a time without a zone is UTC


class SearchObservations(_Args):
    """Search the observations held about the target by meaning."""

    query: str = Field(min_length=1, max_length=2000, description="what to look for")
    levels: list[ObservationLevel] = Field(default_factory=list, description="only these levels (default: all)")
    limit: int = Field(10, ge=1, le=50)


class SearchMessages(_Args):
    """Search the messages the observer could see, by meaning and by words (hybrid, best first)."""

    query: str = Field(min_length=1, max_length=2000)
    limit: int = Field(10, ge=1, le=50)
    session: str | None = Field(None, description="only this session")
    from_target_only: bool = Field(False, description="only messages written by the target")


class GrepMessages(_Args):
    """Find messages containing a literal text (case-insensitive), newest first."""

    pattern: str = Field(min_length=1, max_length=500)
    limit: int = Field(10, ge=1, le=50)


AFTER = "created at or after this time (ISO 8601, UTC when no zone)"
BEFORE = "created before this time (ISO 8601, UTC when no zone)"


class _Window(_Args):
    """A time window [after, before), as SearchMessages takes it."""

    @model_validator(mode="after")
    def _ordered(self):
        if self.after is not None and self.before is not None and self.after >= self.before:
            raise ValueError("after must be earlier than before")
        return self


class MessagesByDateRange(_Window):
    """List the messages the observer could see in a time window, oldest first (to search one: temporal_search)."""

    after: UtcDatetime | None = Field(None, description=AFTER)
    before: UtcDatetime | None = Field(None, description=BEFORE)
    limit: int = Field(20, ge=1, le=50)


class TemporalSearch(_Window):
    """search_messages within a time window: messages the observer could see, by meaning and words, best first."""

    query: str = Field(min_length=1, max_length=2000)
    after: UtcDatetime | None = Field(None, description=AFTER)
    before: UtcDatetime | None = Field(None, description=BEFORE)
    limit: int = Field(10, ge=1, le=50)


class SourceMessages(_Args):
    """The messages, with the verbatim spans, that an explicit observation was taken from."""

    observation_id: str = Field(min_length=1, max_length=512)


class ReasoningChain(_Args):
    """A derived observation's premises, and the observations concluded from it."""

    observation_id: str = Field(min_length=1, max_length=512)


def _observations(rows: Sequence[RowMapping], empty: str) -> ToolResult:
    shown = {r["observation_id"]: "observation" for r in rows}
    return ToolResult("\n".join(map(observation_line, rows)) or empty, shown, len(rows))


def _messages(rows: Sequence[RowMapping], empty: str = "No messages found.") -> ToolResult:
    shown = {r["message_id"]: "message" for r in rows}
    return ToolResult("\n".join(map(message_line, rows)) or empty, shown, len(rows))


async def _search_observations(env: ToolEnv, a: SearchObservations) -> ToolResult:
    vector = (await env.embedder.embed([a.query]))[0]
    async with env.engine.connect() as conn:
        rows = await store_queries.nearest_observations(conn, env.scope.pair(a.levels), vector,
                                                  min(a.limit, env.max_rows), None)
    return _observations(rows, "No observations found.")


async def _message_search(env: ToolEnv, query: str, limit: int, **filters: Any) -> ToolResult:
    """The message search SearchMessages runs, from the observer's perspective: Chat finds what search finds."""
    s = env.scope
    sessions = s.within(filters.pop("session_ids", ()))
    if sessions == () and s.sessions is not None:  # a scope of no sessions recalls nothing
        return _messages([])
    async with env.engine.connect() as conn:  # closed before the embedding call: no session across a model call
        text = await search_text(conn, s.workspace_id, query)
    vector = (await env.embedder.embed([text]))[0]
    filters["before"] = s.before(filters.get("before"))
    filters["session_ids"] = sessions
    search = MessageSearch(s.workspace_id, query, vector, perspective_id=s.observer_id,
                           limit=min(limit, env.max_rows), **filters)
    async with env.engine.connect() as conn:
        return _messages(await search_messages(conn, search))


async def _search_messages(env: ToolEnv, a: SearchMessages) -> ToolResult:
    return await _message_search(env, a.query, a.limit, session_ids=[a.session] if a.session else [],
                                 author_ids=[env.scope.target_id] if a.from_target_only else [])


async def _temporal_search(env: ToolEnv, a: TemporalSearch) -> ToolResult:
    return await _message_search(env, a.query, a.limit, after=a.after, before=a.before)


async def _grep_messages(env: ToolEnv, a: GrepMessages) -> ToolResult:
    s = env.scope
    async with env.engine.connect() as conn:
        rows = await reads.grep_messages(conn, s.workspace_id, s.observer_id, a.pattern, min(a.limit, env.max_rows),
                                         s.before(None), s.sessions)
    return _messages(rows)


async def _messages_by_date_range(env: ToolEnv, a: MessagesByDateRange) -> ToolResult:
    s = env.scope
    async with env.engine.connect() as conn:
        rows = await reads.messages_between(conn, s.workspace_id, s.observer_id, a.after, s.before(a.before),
                                            min(a.limit, env.max_rows), s.sessions)
    return _messages(rows)


async def _source_messages(env: ToolEnv, a: SourceMessages) -> ToolResult:
    s = env.scope
    async with env.engine.connect() as conn:
        found = await reads.pair_observations(conn, s.pair(include_superseded=True), [a.observation_id])
        if not found:
            return ToolResult(f"No observation {a.observation_id} in this memory.", {}, 0)
        sources = (await store_queries.sources_of(conn, s.workspace_id, [a.observation_id]))[a.observation_id]
        ids = [r["message_id"] for r in sources]
        visible = await queries.seen_by(conn, s.workspace_id, s.observer_id, ids)
        by_id = await queries.messages_by_id(conn, s.workspace_id, [i for i in ids if i in visible])
    lines, shown = [], {}
    for src in sources:
        row = by_id.get(src["message_id"])
        if row is not None and (s.sessions is None or row["session_id"] in s.sessions):
            shown[row["message_id"]] = "message"
            lines.append(f"{message_line(row)}\n  span: {src['span']!r}")
    return ToolResult("\n".join(lines) or "This observation cites no messages (it was written without sources).",
                      shown, len(lines))


async def _reasoning_chain(env: ToolEnv, a: ReasoningChain) -> ToolResult:
    s = env.scope
    pair = s.pair(include_superseded=True)
    async with env.engine.connect() as conn:
        found = await reads.pair_observations(conn, pair, [a.observation_id])
        if not found:
            return ToolResult(f"No observation {a.observation_id} in this memory.", {}, 0)
        premise_ids = (await store_queries.premises_of(conn, s.workspace_id, [a.observation_id]))[a.observation_id]
        premises = await reads.pair_observations(conn, pair, premise_ids)
        conclusions = await reads.pair_observations(
            conn, pair, await reads.concluded_from(conn, s.workspace_id, a.observation_id))
    parts = [observation_line(found[0]),
             "Premises:\n" + ("\n".join(map(observation_line, premises)) or "(none)"),
             "Concluded from it:\n" + ("\n".join(map(observation_line, conclusions)) or "(none)")]
    rows = [*found, *premises, *conclusions]
    return ToolResult("\n".join(parts), {r["observation_id"]: "observation" for r in rows}, len(premises) + len(conclusions))


def function_spec(name: str, args: type[BaseModel]) -> dict[str, Any]:
    """An OpenAI function-tool spec: the description and parameters come from the input model."""
    return {"type": "function", "function": {
        "name": name, "description": (args.__doc__ or "").strip(), "parameters": args.model_json_schema()}}


@dataclass(frozen=True)
class Tool:
    name: str
    args: type[_Args]
    run: Callable[[ToolEnv, Any], Awaitable[ToolResult]]

    def spec(self) -> dict[str, Any]:
        return function_spec(self.name, self.args)


TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool("search_observations", SearchObservations, _search_observations),
    Tool("search_messages", SearchMessages, _search_messages),
    Tool("grep_messages", GrepMessages, _grep_messages),
    Tool("messages_by_date_range", MessagesByDateRange, _messages_by_date_range),
    Tool("temporal_search", TemporalSearch, _temporal_search),
    Tool("source_messages", SourceMessages, _source_messages),
    Tool("reasoning_chain", ReasoningChain, _reasoning_chain),
)}


def specs(names: Sequence[str]) -> list[dict[str, Any]]:
    return [TOOLS[n].spec() for n in names]


def parse_arguments(raw: str | Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments as a dict ({} for empty text); ValueError when they are not a JSON object."""
    value = raw if isinstance(raw, Mapping) else json.loads(raw or "{}")
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    return value


async def execute(env: ToolEnv, call: ToolCall, allowed: Sequence[str]) -> ToolResult:
    """Run one call; a bad name or bad arguments become an error result the model can correct."""
    tool = TOOLS.get(call.name) if call.name in allowed else None
    if tool is None:
        return ToolResult(f"error: no tool {call.name!r}; available: {', '.join(allowed)}", {}, 0)
    try:
        args = tool.args.model_validate(parse_arguments(call.arguments))
    except (ValueError, ValidationError) as error:
        return ToolResult(f"error: bad arguments for {call.name}: {error}"[:1000], {}, 0)
    result = await tool.run(env, args)
    if len(result.text) <= env.max_chars:
        return result
    text = result.text[: env.max_chars] + "\n[truncated]"
    # only what survived the cut was shown
    return ToolResult(text, {i: k for i, k in result.shown.items() if i in text}, result.hits)
