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
from services.events.lifecycle import (
    MemberJoined,
    MemberLeft,
    PeerConfigured,
    PeerCreated,
    SessionCreated,
    WorkspaceCreated,
)
from services.events.messages import MessageAppended

__all__ = [
    "Event",
    "EventDecodeError",
    "MemberJoined",
    "MemberLeft",
    "MessageAppended",
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
