"""The memory-reading tools Chat and the dream specialists offer, over one (observer, target) pair.

Each tool reads the projections through MemoryReads, the narrow port projections implements: one short
connection per read, never one held across a model call. Reads stay within the scope: the pair's store, and
messages the observer could see.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BeforeValidator, Field, Strict, model_validator

from services.events.text import inert
from services.events.times import day, minute
from services.llm.client import ToolCall
from services.llm.embeddings import Embedder
from services.llm.rerank import Reranker
from services.toolloop.registry import Tool, ToolArgs, ToolResult, run_call

Row = Mapping[str, Any]  # one projection row, by column name
ObservationLevel = Literal["explicit", "deductive", "inductive", "contradiction"]
DERIVED_LEVELS = ("deductive", "inductive", "contradiction")


@dataclass(frozen=True)
class RecallScope:
    """What a tool may recall: the (observer, target) pair's store and the messages the reader could see."""

    workspace_id: str
    observer_id: str
    target_id: str
    session_id: str = ""
    as_of: datetime | None = None  # memory as it stood then: observations and messages recorded by then
    sessions: tuple[str, ...] | None = None  # a scope's sessions: recall only these (None: no bound)
    perspective_id: str = ""  # whose sight bounds the messages read, when not the observer's
    zone: tzinfo = UTC  # the asker's: the days its searches' time words name
    # the asker's token sees less than the workspace: its searches rank without the workspace's statistics,
    # which would tell what the sessions it never joined hold
    narrow: bool = False

    @property
    def reader_id(self) -> str:
        """The peer whose perspective every message read takes: the perspective peer, else the observer."""
        return self.perspective_id or self.observer_id

    def within(self, session_ids: Sequence[str]) -> tuple[str, ...] | None:
        """A message filter's sessions, narrowed to the scope's; () when nothing is left to search."""
        if self.sessions is None:
            return tuple(session_ids)
        return tuple(s for s in session_ids if s in self.sessions) if session_ids else self.sessions

    def before(self, before: datetime | None) -> datetime | None:
        """A message window's upper bound, never past `as_of` (a message sent at or after it did not exist then)."""
        bounds = [b for b in (before, self.as_of) if b is not None]
        return min(bounds) if bounds else None


class MemoryReads(Protocol):
    """The projection reads the memory tools make, each within `scope` (its pair, `as_of` and sessions)."""

    async def nearest_observations(
        self, scope: RecallScope, levels: Sequence[str], vector: Sequence[float], limit: int
    ) -> Sequence[Row]:
        """The pair's live observations of `levels` (all when empty) nearest to `vector`, nearest first."""

    async def search_text(self, workspace_id: str, query: str) -> str:
        """The text a message search embeds for `query`."""

    async def search_messages(
        self,
        scope: RecallScope,
        query: str,
        vector: Sequence[float],
        limit: int,
        *,
        session_ids: tuple[str, ...] | None,
        before: datetime | None,
        author_ids: Sequence[str] = (),
        after: datetime | None = None,
    ) -> Sequence[Row]:
        """The hybrid message search from the observer's perspective, best first."""

    async def grep_messages(
        self, scope: RecallScope, pattern: str, limit: int, before: datetime | None
    ) -> Sequence[Row]:
        """Messages the observer could see containing `pattern` (literal, any case), newest first."""

    async def messages_between(
        self, scope: RecallScope, after: datetime | None, before: datetime | None, limit: int
    ) -> Sequence[Row]:
        """Messages the observer could see created in [after, before), oldest first."""

    async def observation_sources(self, scope: RecallScope, observation_id: str) -> list[tuple[Row, str]] | None:
        """The messages an observation of the pair (superseded too) was taken from that the observer could
        see, each with its verbatim span, in source order; None when the pair has no such observation."""

    async def reasoning_chain(
        self, scope: RecallScope, observation_id: str
    ) -> tuple[Row, Sequence[Row], Sequence[Row]] | None:
        """An observation of the pair (superseded too), its premises and the observations concluded from it;
        None when the pair has no such observation."""


@dataclass(frozen=True)
class ToolEnv:
    reads: MemoryReads
    embedder: Embedder
    scope: RecallScope
    max_rows: int
    max_chars: int
    reranker: Reranker | None = None  # message searches re-rank their best candidates with it


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:  # in UTC now: "0001-01-01T00:00:00+14:00" is before year 1 there, which no time can hold
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value.isoformat()} is outside the years 1 to 9999 in UTC") from None


def _text(value: object) -> object:
    if not isinstance(value, str):
        raise ValueError("a time must be ISO 8601 text, such as 2024-05-01 or 2024-05-01T14:30:00Z")
    return value


# ISO 8601 text alone: a number would be read as seconds or milliseconds since 1970, which no model means;
# a time without a zone is UTC
UtcDatetime = Annotated[datetime, Strict(False), BeforeValidator(_text), AfterValidator(_utc)]


class SearchObservations(ToolArgs):
    """Search the observations held about the target by meaning."""

    query: str = Field(min_length=1, max_length=2000, description="what to look for")
    levels: list[ObservationLevel] = Field(default_factory=list, description="only these levels (default: all)")
    limit: int = Field(10, ge=1, le=50)


class SearchMessages(ToolArgs):
    """Search the messages the observer could see, by meaning and by words (hybrid, best first)."""

    query: str = Field(min_length=1, max_length=2000)
    limit: int = Field(10, ge=1, le=50)
    session: str | None = Field(None, description="only this session")
    from_target_only: bool = Field(False, description="only messages written by the target")


class GrepMessages(ToolArgs):
    """Find messages containing a literal text (case-insensitive), newest first."""

    pattern: str = Field(min_length=1, max_length=500)
    limit: int = Field(10, ge=1, le=50)


AFTER = "created at or after this time (ISO 8601, UTC when no zone)"
BEFORE = "created before this time (ISO 8601, UTC when no zone)"


class _Window(ToolArgs):
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


class SourceMessages(ToolArgs):
    """The messages, with the verbatim spans, that an explicit observation was taken from."""

    observation_id: str = Field(min_length=1, max_length=512)


class ReasoningChain(ToolArgs):
    """A derived observation's premises, and the observations concluded from it."""

    observation_id: str = Field(min_length=1, max_length=512)


def observation_line(row: Row) -> str:
    state = " superseded" if row.get("superseded_by") else ""
    created = row["created_at"].astimezone(UTC)  # in UTC whatever the database session's TimeZone
    return f"[obs:{row['observation_id']}] ({row['level']}{state}, {day(created)}) {inert(row['content'])}"


def message_line(row: Row) -> str:
    return (
        f"[msg:{row['message_id']}] ({minute(row['created_at'].astimezone(UTC))} UTC, "
        f"session {row['session_id']}) "
        f"{author(row)}: {inert(row['content'])}"
    )


def author(row: Row) -> str:
    """A message's author as the model reads it (`called`)."""
    return called(row["peer_id"], row.get("author_name"))


def called(peer_id: str, name: str | None) -> str:
    """How a model is shown a peer: its display name beside its id, so that a question's "Maria" meets
    peer u-7f3a, and an answer can still name the peer by id. The name is shown `inert`, as a message's words
    are: a peer names itself, and a name on the log from before names were checked may hold line breaks."""
    shown = inert(name or "")
    return f"{shown} ({peer_id})" if shown else peer_id


def _observations(rows: Sequence[Row], empty: str) -> ToolResult:
    shown = {r["observation_id"]: "observation" for r in rows}
    return ToolResult("\n".join(map(observation_line, rows)) or empty, shown, len(rows))


def _messages(rows: Sequence[Row], empty: str = "No messages found.") -> ToolResult:
    shown = {r["message_id"]: "message" for r in rows}
    return ToolResult("\n".join(map(message_line, rows)) or empty, shown, len(rows))


async def _search_observations(env: ToolEnv, a: SearchObservations) -> ToolResult:
    vector = (await env.embedder.embed([a.query]))[0]
    rows = await env.reads.nearest_observations(env.scope, a.levels, vector, min(a.limit, env.max_rows))
    return _observations(rows, "No observations found.")


async def _message_search(
    env: ToolEnv,
    query: str,
    limit: int,
    session_ids: Sequence[str] = (),
    before: datetime | None = None,
    **filters: Any,
) -> ToolResult:
    """The message search SearchMessages runs, from the observer's perspective: Chat finds what search finds."""
    s = env.scope
    sessions = s.within(session_ids)
    if sessions == () and s.sessions is not None:  # a scope of no sessions recalls nothing
        return _messages([])
    text = await env.reads.search_text(s.workspace_id, query)  # its connection closes before the embedding call
    vector = (await env.embedder.embed([text]))[0]
    limit = min(limit, env.max_rows)
    depth = env.reranker.depth(limit) if env.reranker else limit
    rows = await env.reads.search_messages(
        s, query, vector, depth, session_ids=sessions, before=s.before(before), **filters
    )
    return _messages(await env.reranker.rerank(query, rows, limit) if env.reranker else rows)


async def _search_messages(env: ToolEnv, a: SearchMessages) -> ToolResult:
    return await _message_search(
        env,
        a.query,
        a.limit,
        session_ids=[a.session] if a.session else [],
        author_ids=[env.scope.target_id] if a.from_target_only else [],
    )


async def _temporal_search(env: ToolEnv, a: TemporalSearch) -> ToolResult:
    return await _message_search(env, a.query, a.limit, after=a.after, before=a.before)


async def _grep_messages(env: ToolEnv, a: GrepMessages) -> ToolResult:
    s = env.scope
    return _messages(await env.reads.grep_messages(s, a.pattern, min(a.limit, env.max_rows), s.before(None)))


async def _messages_by_date_range(env: ToolEnv, a: MessagesByDateRange) -> ToolResult:
    s = env.scope
    return _messages(await env.reads.messages_between(s, a.after, s.before(a.before), min(a.limit, env.max_rows)))


def _not_found(observation_id: str) -> ToolResult:
    return ToolResult(f"No observation {observation_id} in this memory.", {}, 0)


async def _source_messages(env: ToolEnv, a: SourceMessages) -> ToolResult:
    s = env.scope
    sources = await env.reads.observation_sources(s, a.observation_id)
    if sources is None:
        return _not_found(a.observation_id)
    lines, shown = [], {}
    for row, span in sources:
        if s.sessions is None or row["session_id"] in s.sessions:
            shown[row["message_id"]] = "message"
            # a span is a message's own words: shown inert, as its content is
            lines.append(f"{message_line(row)}\n  span: {inert(span)!r}")
    return ToolResult(
        "\n".join(lines) or "This observation cites no messages (it was written without sources).", shown, len(lines)
    )


async def _reasoning_chain(env: ToolEnv, a: ReasoningChain) -> ToolResult:
    chain = await env.reads.reasoning_chain(env.scope, a.observation_id)
    if chain is None:
        return _not_found(a.observation_id)
    found, premises, conclusions = chain
    parts = [
        observation_line(found),
        "Premises:\n" + ("\n".join(map(observation_line, premises)) or "(none)"),
        "Concluded from it:\n" + ("\n".join(map(observation_line, conclusions)) or "(none)"),
    ]
    rows = [found, *premises, *conclusions]
    shown = {r["observation_id"]: "observation" for r in rows}
    return ToolResult("\n".join(parts), shown, len(premises) + len(conclusions))


SEARCH_OBSERVATIONS = Tool("search_observations", SearchObservations, _search_observations)
SEARCH_MESSAGES = Tool("search_messages", SearchMessages, _search_messages)
GREP_MESSAGES = Tool("grep_messages", GrepMessages, _grep_messages)
MESSAGES_BY_DATE_RANGE = Tool("messages_by_date_range", MessagesByDateRange, _messages_by_date_range)
TEMPORAL_SEARCH = Tool("temporal_search", TemporalSearch, _temporal_search)
SOURCE_MESSAGES = Tool("source_messages", SourceMessages, _source_messages)
REASONING_CHAIN = Tool("reasoning_chain", ReasoningChain, _reasoning_chain)
TOOLS: dict[str, Tool[ToolEnv]] = {
    t.name: t
    for t in (
        SEARCH_OBSERVATIONS,
        SEARCH_MESSAGES,
        GREP_MESSAGES,
        MESSAGES_BY_DATE_RANGE,
        TEMPORAL_SEARCH,
        SOURCE_MESSAGES,
        REASONING_CHAIN,
    )
}


def specs(names: Sequence[str]) -> list[dict[str, Any]]:
    return [TOOLS[n].spec() for n in names]


async def execute(env: ToolEnv, call: ToolCall, allowed: Sequence[str]) -> ToolResult:
    """Run one call; its result cut to env.max_chars, keeping only the ids still in the text as shown."""
    result = await run_call(TOOLS, env, call, allowed)
    if len(result.text) <= env.max_chars:
        return result
    text = result.text[: env.max_chars] + "\n[truncated]"
    # only what survived the cut was shown
    return ToolResult(text, {i: k for i, k in result.shown.items() if i in text}, result.hits)
