"""Typed values: what calls return (frozen dataclasses mirroring the protos field for field) and what
some calls take (NewMessage, MemberSpec, NewObservation, ObservationSource).

Times are timezone-aware UTC datetimes, None where the server left them unset; metadata and other
JSON-like fields are dicts; repeated fields are tuples; enum values are short lower-case names
("explicit", "low").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from peerlog_client import render

T = TypeVar("T")
Level = Literal["minimal", "low", "medium", "high", "max"]
ObservationLevel = Literal["explicit", "deductive", "inductive", "contradiction"]
ConfigurationLevel = Literal["global", "workspace", "session", "message"]
frozen = dataclass(frozen=True, slots=True)


# ---- what calls take --------------------------------------------------------------------------------


@frozen
class Configuration:
    """The reasoning settings of one level (workspace, session or message); None inherits from the level
    below. Setting a level replaces its whole configuration: name every setting to keep."""

    reasoning: bool | None = None  # derive observations and summaries at all
    observe_me: bool | None = None  # a peer's own messages build its self-model (where neither says)
    observe_others: bool | None = None  # members model the other members (where the member did not ask)
    summaries: bool | None = None
    summary_short_every: int | None = None  # messages between short summaries (>= 1)
    summary_long_every: int | None = None  # messages between long summaries (>= 1)
    dreams: bool | None = None
    dream_threshold: int | None = None  # new explicit observations that make a dream due (>= 1)
    peer_card: bool | None = None
    deriver_instructions: str | None = None  # added to the deriver's prompt (<= 2,000 characters)
    dialectic_instructions: str | None = None  # added to the dialectic's prompt (<= 2,000 characters)


@frozen
class NewMessage:
    """One turn to add. `created_at` backdates it (a naive datetime is taken as UTC); `message_id` is the
    caller's own id for it (new in the workspace), else the server assigns one."""

    peer_id: str
    content: str
    created_at: datetime | None = None
    metadata: dict[str, Any] | None = None
    message_id: str = ""
    configuration: Configuration | None = None  # the message level of the configuration


@frozen
class MemberSpec:
    """A session member and its session-level observation settings (None: observe_me the peer's own,
    observe_others the configuration's)."""

    peer_id: str
    observe_me: bool | None = None
    observe_others: bool | None = None


@frozen
class ObservationSource:
    """A message behind an observation and the verbatim span in it ("" cites the whole message)."""

    message_id: str
    span: str = ""


@frozen
class NewObservation:
    """An explicit observation a client writes itself; `observation_id` is the caller's own id for it (sent
    again with the same observation, nothing more is written), else the server assigns one."""

    content: str
    session_id: str = ""
    sources: tuple[ObservationSource, ...] = ()
    observation_id: str = ""


# ---- workspaces, peers, sessions, messages ----------------------------------------------------------


@frozen
class Workspace:
    workspace_id: str
    metadata: dict[str, Any]
    created_at: datetime | None


@frozen
class Peer:
    workspace_id: str
    peer_id: str
    observe_me: bool
    metadata: dict[str, Any]
    created_at: datetime | None


@frozen
class Membership:
    """One membership period; `left_at` is None while the peer is still a member."""

    peer_id: str
    observe_me: bool | None
    observe_others: bool | None  # None: the member did not say (the configuration's applies)
    joined_at: datetime | None
    left_at: datetime | None


@frozen
class Session:
    workspace_id: str
    session_id: str
    metadata: dict[str, Any]
    created_at: datetime | None
    memberships: tuple[Membership, ...]  # current ones and the newest past ones, 1,000 at most
    message_count: int
    membership_periods: int = 0  # current and past, in all

    @property
    def members(self) -> tuple[str, ...]:
        """The current members, in join order."""
        return tuple(m.peer_id for m in self.memberships if m.left_at is None)


@frozen
class MessageOrigin:
    """Where a cloned message was first sent."""

    workspace_id: str
    session_id: str
    message_id: str


@frozen
class Message:
    """`origin` is set on a message CloneSession copied (GetMessage and search hits show it; lists leave it
    None)."""

    workspace_id: str
    session_id: str
    message_id: str
    peer_id: str
    content: str
    created_at: datetime | None
    metadata: dict[str, Any]
    seq: int
    origin: MessageOrigin | None = None
    author_name: str = ""  # the author's display name when it was sent, if its peer had one


@frozen
class ScoredMessage:
    """A search hit; `score` is comparable within one result list only (higher is better). With
    `include_adjacent=True`, the turns just before and after it in its session, when there are any."""

    message: Message
    score: float
    previous: Message | None = None
    next: Message | None = None


class SearchHits(tuple[ScoredMessage, ...]):
    """A search's hits, best first (a tuple), and whether the server cut the list short to keep its reply
    under the transport's size limit (`truncated`: ask for fewer hits, or narrow the search, to see the rest)."""

    truncated: bool

    def __new__(cls, hits: tuple[ScoredMessage, ...] = (), truncated: bool = False) -> SearchHits:
        made = super().__new__(cls, hits)
        made.truncated = truncated
        return made


@frozen
class AddedMessages:
    message_ids: tuple[str, ...]
    consistency_token: str


@frozen
class SessionSummary:
    content: str
    last_message_id: str
    last_seq: int
    messages_covered: int
    token_count: int
    model: str
    created_at: datetime | None


@frozen
class SessionSummaries:
    """The latest short and long summary; each None until the summarizer has written one."""

    short_summary: SessionSummary | None
    long_summary: SessionSummary | None


@frozen
class PeerCard:
    workspace_id: str
    observer_id: str
    observed_id: str
    entries: tuple[str, ...]
    updated_at: datetime | None
    producer: Producer | None = None  # who set it: the API (a client) or the dreamer, with its model
    dream_id: str = ""  # the dream that set it; empty for a client's card


# ---- context and representation ---------------------------------------------------------------------


@frozen
class ContextPremise:
    observation_id: str
    level: str
    content: str


@frozen
class ContextObservation:
    observation_id: str
    level: str
    content: str
    created_at: datetime | None
    session_id: str
    times_derived: int
    premises: tuple[ContextPremise, ...]
    confidence: str
    pattern_type: str


@frozen
class ContextMessage:
    message_id: str
    peer_id: str
    content: str
    author_name: str = ""  # the author's display name, if its peer has one


@frozen
class RelevantMessage:
    message_id: str
    peer_id: str
    session_id: str
    content: str
    created_at: datetime | None
    score: float
    author_name: str = ""  # the author's display name, if its peer has one


@frozen
class ChatMessage:
    """A turn as the server renders it (GetContext with an assistant peer)."""

    role: str
    content: str
    name: str


@frozen
class TokenCounts:
    representation: int
    card: int
    summary: int
    messages: int
    total: int
    relevant_messages: int


@frozen
class Context:
    """A token-budgeted context for a session; `to_openai()` / `to_anthropic()` make it model input."""

    observations: tuple[ContextObservation, ...]
    representation: str
    peer_card: tuple[str, ...]
    summary_kind: str
    summary: str
    messages: tuple[ContextMessage, ...]
    tokens: TokenCounts | None
    chat_messages: tuple[ChatMessage, ...]
    relevant_messages: tuple[RelevantMessage, ...]
    # the client's own, not on the wire: the peer whose turns are the model's, as context() was asked
    assistant_peer_id: str = field(default="", metadata={"local": True})

    def system_text(self) -> str:
        """Representation, peer card, summary and relevant past messages as one system prompt."""
        return render.system_text(self)

    def to_openai(self, assistant: str | None = None) -> list[dict[str, Any]]:
        """OpenAI chat messages: one system message, then the turns (`assistant`'s as "assistant",
        everyone else's as "user" with their peer id as `name`). `assistant` defaults to the one
        context() was called with."""
        return render.openai_messages(self, self._assistant(assistant))

    def to_anthropic(self, assistant: str | None = None) -> tuple[str, list[dict[str, Any]]]:
        """Anthropic input: (system text, messages). Turns alternate user/assistant and start with a
        user turn, as the Messages API requires; other speakers' turns are prefixed with their id."""
        return render.anthropic_messages(self, self._assistant(assistant))

    def _assistant(self, assistant: str | None) -> str:
        return self.assistant_peer_id if assistant is None else assistant


@frozen
class Representation:
    """A pair's working representation: observations in time order, and as markdown by level."""

    observations: tuple[ContextObservation, ...]
    markdown: str
    truncated: bool = False  # the lowest-ranked were left out: the reply would have passed 3.5 MB


# ---- dialectic --------------------------------------------------------------------------------------


@frozen
class ChatAnswer:
    answer: str
    cited_observation_ids: tuple[str, ...]
    cited_message_ids: tuple[str, ...]
    tool_rounds: int
    model: str
    abstained: bool
    prompt_version: str


@frozen
class ToolProgress:
    """One tool call of the agent, streamed (`arguments` is JSON text)."""

    round: int
    tool: str
    arguments: str
    results: int


@frozen
class ChatText:
    """The next piece of the answer's text."""

    text: str


@frozen
class DiscardText:
    """The text chunks since the previous non-text event were not the answer: drop them."""


ChatEvent = ChatText | ToolProgress | DiscardText | ChatAnswer  # the last event is always a ChatAnswer


# ---- dreams -----------------------------------------------------------------------------------------


@frozen
class Dream:
    dream_id: str
    observer_id: str
    observed_id: str
    reason: str
    new_explicit: int
    state: str
    edits: int
    error: str
    requested_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None


# ---- observations -----------------------------------------------------------------------------------


@frozen
class Observation:
    workspace_id: str
    observation_id: str
    observer_id: str
    observed_id: str
    level: str
    content: str
    session_id: str
    confidence: str
    times_derived: int
    created_at: datetime | None
    superseded_by: str
    superseded_at: datetime | None
    deleted_at: datetime | None
    delete_reason: str
    sources: tuple[ObservationSource, ...]
    premise_ids: tuple[str, ...]
    pattern_type: str
    premise_superseded_at: datetime | None
    dream_id: str
    derivation: str
    source_count: int = 0  # sources in all; `sources` holds the first 100


@frozen
class ObservationMatch:
    """A search hit: cosine `distance` 0..2, smaller is closer."""

    observation: Observation
    distance: float


@frozen
class CreatedObservations:
    observation_ids: tuple[str, ...]
    consistency_token: str


@frozen
class LogPosition:
    """One partition of one log topic and the next offset to read there."""

    topic: str
    partition: int
    offset: int


@frozen
class LogEvent:
    """One of peerlog's events (README, "Events for other services"): its type and schema_version, its
    partition key, where it sits in the log, the whole event as a dict, and the cursor to resume after it."""

    type: str
    schema_version: int
    event_id: str
    key: str
    position: LogPosition
    data: dict[str, Any]
    cursor: tuple[LogPosition, ...]


@frozen
class Webhook:
    """A registered URL of a workspace and the event types it receives (empty: all)."""

    webhook_id: str
    workspace_id: str
    url: str
    event_types: tuple[str, ...]
    created_at: datetime | None


@frozen
class CreatedWebhook:
    """A new webhook and its signing secret (shown this once)."""

    webhook: Webhook
    secret: str


@frozen
class WebhookDeadLetter:
    """An event the delivery gave up on: its JSON as POSTed, the attempts made and the last error."""

    event_id: str
    event_type: str
    json: str
    attempts: int
    error: str


@frozen
class WebhookRetry:
    delivered: bool
    error: str


@frozen
class Scope:
    """A named group of sessions that bounds recall: pass its id as `scope=` to a read."""

    workspace_id: str
    scope_id: str
    name: str
    session_ids: tuple[str, ...]
    created_at: datetime | None


@frozen
class ClonedSession:
    """A session made by clone(): the new session, its copies' ids in the source's order, and the write's
    log position."""

    session: Session
    message_ids: tuple[str, ...]
    consistency_token: str


@frozen
class Written:
    """A write that returns nothing but its log position."""

    consistency_token: str


@frozen
class EffectiveConfiguration:
    """Every setting's value in force (`values`, all set) and the level it came from, by setting name."""

    values: Configuration
    levels: dict[str, ConfigurationLevel]


@frozen
class ProcessingCounts:
    pending: int
    in_flight: int
    done: int
    dead_lettered: int


@frozen
class DreamCounts:
    requested: int
    started: int
    completed: int
    failed: int


@frozen
class DeadLetteredBatch:
    batch_id: str
    observer_id: str
    observed_id: str
    message_ids: tuple[str, ...]  # the first 100
    error: str
    failed_at: datetime | None
    message_count: int = 0  # in all


@frozen
class DeadLetteredSummary:
    session_id: str
    error: str
    attempts: int
    failed_at: datetime | None


@frozen
class ProcessingStatus:
    counts: ProcessingCounts | None
    dead_lettered_batches: tuple[DeadLetteredBatch, ...]
    dreams: DreamCounts | None
    dead_lettered_summaries: tuple[DeadLetteredSummary, ...]


# ---- audit ------------------------------------------------------------------------------------------


@frozen
class SourceMessage:
    """`origin` is set when the cited message is a copy CloneSession made."""

    message_id: str
    span: str
    session_id: str
    peer_id: str
    content: str
    created_at: datetime | None
    origin: MessageOrigin | None = None


@frozen
class ProvenanceNode:
    observation: Observation | None
    source_messages: tuple[SourceMessage, ...]


@frozen
class Provenance:
    """The premise DAG under `root_id`: the root first, then breadth first."""

    root_id: str
    nodes: tuple[ProvenanceNode, ...]
    missing_ids: tuple[str, ...]
    truncated: bool


@frozen
class Producer:
    component: str
    version: str
    model: str
    prompt_version: str


@frozen
class HistoryEntry:
    event_id: str
    kind: str
    occurred_at: datetime | None
    producer: Producer | None
    causation_id: str
    detail: dict[str, Any]


@frozen
class RejectedObservation:
    rejection_id: str
    observer_id: str
    observed_id: str
    level: str
    content: str
    reason: str
    sources: tuple[ObservationSource, ...]
    premise_ids: tuple[str, ...]
    batch_id: str
    dream_id: str
    rejected_at: datetime | None


# ---- paging -----------------------------------------------------------------------------------------


@frozen
class Page(Generic[T]):
    """One page of a list; the handles' iterators follow `next_page_token` for you."""

    items: tuple[T, ...]
    next_page_token: str = field(default="")
