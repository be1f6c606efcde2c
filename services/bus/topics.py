"""Every Kafka topic: name, key shape, partitioning and config, and which events go where.

Log topics are the source of truth and keep data forever; only changelog/state topics compact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.events import (
    BatchDerived,
    DerivationDeadLettered,
    DerivationDue,
    DerivationPromoted,
    DerivationStarted,
    DreamCheckDue,
    DreamCompleted,
    DreamFailed,
    DreamForced,
    DreamRequested,
    DreamStarted,
    Event,
    MemberJoined,
    MemberLeft,
    MessageAppended,
    MessageConfigured,
    MessagePerceived,
    MessagesEmbedded,
    ObservationAdded,
    ObservationDeleted,
    ObservationReinforced,
    ObservationRejected,
    ObservationsEmbedded,
    ObservationSuperseded,
    PeerCardUpdated,
    PeerConfigured,
    PeerCreated,
    PeerMetadataSet,
    ScopeCreated,
    ScopeSessionsAdded,
    ScopeSessionsRemoved,
    SessionConfigured,
    SessionCreated,
    SummaryDeadLettered,
    SummaryRetryRequested,
    SummaryUpdated,
    WorkspaceConfigured,
    WorkspaceCreated,
)

LOG_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
COMPACTED_CONFIG = {"cleanup.policy": "compact"}


@dataclass(frozen=True)
class TopicSpec:
    """A topic by its unprefixed name. `key` documents the key shape its events use."""

    name: str
    key: str
    events: tuple[type[Event], ...]
    config: dict[str, str] = field(default_factory=lambda: dict(LOG_CONFIG))

    def full_name(self, prefix: str) -> str:
        return f"{prefix}{self.name}"


DIRECTORY = TopicSpec(
    name="directory",
    key="workspace",
    # WorkspaceConfigured is the workspace's history; the API stamps its value on every message accepted
    # after it, because a workspace-keyed event cannot be ordered with every session's partition
    # scope changes too: a workspace's scopes on one partition, in the order the projection numbers them
    events=(
        WorkspaceCreated,
        PeerCreated,
        PeerConfigured,
        PeerMetadataSet,
        WorkspaceConfigured,
        ScopeCreated,
        ScopeSessionsAdded,
        ScopeSessionsRemoved,
    ),
)
SESSIONS = TopicSpec(
    name="sessions",
    key="workspace/session",
    # membership and messages share a key so the router sees them in the order they happened
    events=(
        SessionCreated,
        MemberJoined,
        MemberLeft,
        MessageAppended,
        SummaryRetryRequested,
        SessionConfigured,
        MessageConfigured,
    ),
)

PERCEIVED = TopicSpec(
    name="perceived",
    key="workspace/observer/observed",
    # a promotion sits among the pair's perceptions: the deriver switches derivation exactly there
    events=(MessagePerceived, DerivationDue, DerivationPromoted),
)
OBSERVATIONS = TopicSpec(
    name="observations",
    key="workspace/observer/observed",
    # one partition holds a pair's whole store history, in order
    events=(
        ObservationAdded,
        ObservationReinforced,
        ObservationSuperseded,
        ObservationDeleted,
        ObservationRejected,
        DerivationStarted,
        BatchDerived,
        PeerCardUpdated,
        ObservationsEmbedded,
    ),
)
MESSAGE_EMBEDDINGS = TopicSpec(
    name="message-embeddings",
    key="workspace/session",
    events=(MessagesEmbedded,),
)
SUMMARIES = TopicSpec(
    name="summaries",
    key="workspace/session",
    events=(SummaryUpdated,),
)
DREAMS = TopicSpec(
    name="dreams",
    key="workspace/observer/observed",
    events=(DreamForced, DreamCheckDue, DreamRequested, DreamStarted, DreamCompleted, DreamFailed),
)
DEADLETTER = TopicSpec(
    name="deadletter",
    key="*",  # pair-keyed and session-keyed failures both land here
    events=(DerivationDeadLettered, SummaryDeadLettered),
)

ALL_TOPICS: tuple[TopicSpec, ...] = (
    DIRECTORY,
    SESSIONS,
    PERCEIVED,
    OBSERVATIONS,
    MESSAGE_EMBEDDINGS,
    SUMMARIES,
    DREAMS,
    DEADLETTER,
)

_TOPIC_OF: dict[type[Event], TopicSpec] = {e: t for t in ALL_TOPICS for e in t.events}


def topic_for(event: Event) -> TopicSpec:
    """The topic an event belongs on."""
    try:
        return _TOPIC_OF[type(event)]
    except KeyError:
        raise LookupError(f"no topic declared for {type(event).__name__}") from None


def _check_keys() -> None:
    # a topic's events must all key the same way, or per-key ordering would be a lie
    for spec in ALL_TOPICS:
        if spec.key == "*":
            continue
        shapes = {"/".join(f.removesuffix("_id") for f in e.key_fields) for e in spec.events}
        assert shapes == {spec.key}, f"{spec.name}: events key as {shapes}, topic says {spec.key}"


_check_keys()
