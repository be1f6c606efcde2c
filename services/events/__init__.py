"""The events: the only facts peerlog knows. Pure pydantic models, no I/O."""

from services.events.base import (
    Event,
    EventDecodeError,
    ProducerInfo,
    UnknownEventType,
    UnsupportedSchemaVersion,
    decode,
    encode,
    event_types,
    new_event_id,
)
from services.events.cards import PeerCardUpdated
from services.events.lifecycle import (
    MemberJoined,
    MemberLeft,
    PeerConfigured,
    PeerCreated,
    SessionCreated,
    WorkspaceCreated,
)
from services.events.messages import EmbeddedMessage, MessageAppended, MessagesEmbedded
from services.events.observations import (
    BatchDerived,
    DerivationDeadLettered,
    DerivationStarted,
    Level,
    ObservationAdded,
    ObservationDeleted,
    ObservationReinforced,
    ObservationRejected,
    ObservationSuperseded,
    PairEvent,
    Source,
)
from services.events.perception import DerivationDue, MessagePerceived, Turn
from services.events.summaries import SummaryDeadLettered, SummaryKind, SummaryUpdated

__all__ = [
    "BatchDerived",
    "DerivationDeadLettered",
    "DerivationDue",
    "DerivationStarted",
    "Level",
    "MessagePerceived",
    "ObservationAdded",
    "ObservationDeleted",
    "ObservationReinforced",
    "ObservationRejected",
    "ObservationSuperseded",
    "PairEvent",
    "Source",
    "SummaryDeadLettered",
    "SummaryKind",
    "SummaryUpdated",
    "Turn",
    "Event",
    "EventDecodeError",
    "MemberJoined",
    "MemberLeft",
    "MessageAppended",
    "MessagesEmbedded",
    "EmbeddedMessage",
    "PeerCardUpdated",
    "PeerConfigured",
    "PeerCreated",
    "ProducerInfo",
    "SessionCreated",
    "UnknownEventType",
    "UnsupportedSchemaVersion",
    "WorkspaceCreated",
    "decode",
    "encode",
    "event_types",
    "new_event_id",
]
