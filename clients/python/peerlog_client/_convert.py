"""Protobuf to typed values and back, driven by the descriptors: one table says which dataclass mirrors
which message, and every field converts by its kind (time, JSON object, enum, nested message, list)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, tzinfo
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from google.protobuf import json_format, struct_pb2, timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message as Proto

from peerlog_client import models as m

MODEL_OF: dict[str, type] = {
    f"peerlog.v1.{proto}": model
    for proto, model in {
        "Workspace": m.Workspace,
        "Peer": m.Peer,
        "Membership": m.Membership,
        "Session": m.Session,
        "Message": m.Message,
        "MessageOrigin": m.MessageOrigin,
        "ScoredMessage": m.ScoredMessage,
        "AddMessagesResponse": m.AddedMessages,
        "SessionSummary": m.SessionSummary,
        "GetSessionSummariesResponse": m.SessionSummaries,
        "PeerCard": m.PeerCard,
        "ContextPremise": m.ContextPremise,
        "ContextObservation": m.ContextObservation,
        "ContextMessage": m.ContextMessage,
        "RelevantMessage": m.RelevantMessage,
        "ChatMessage": m.ChatMessage,
        "TokenCounts": m.TokenCounts,
        "GetContextResponse": m.Context,
        "GetRepresentationResponse": m.Representation,
        "ChatResponse": m.ChatAnswer,
        "ToolProgress": m.ToolProgress,
        "Dream": m.Dream,
        "Observation": m.Observation,
        "ObservationSource": m.ObservationSource,
        "ObservationMatch": m.ObservationMatch,
        "CreateObservationsResponse": m.CreatedObservations,
        "DeleteObservationResponse": m.Written,
        "ScheduleDreamResponse": m.Written,
        "ProcessingCounts": m.ProcessingCounts,
        "DreamCounts": m.DreamCounts,
        "DeadLetteredBatch": m.DeadLetteredBatch,
        "DeadLetteredSummary": m.DeadLetteredSummary,
        "GetProcessingStatusResponse": m.ProcessingStatus,
        "SourceMessage": m.SourceMessage,
        "ProvenanceNode": m.ProvenanceNode,
        "GetProvenanceResponse": m.Provenance,
        "Producer": m.Producer,
        "HistoryEntry": m.HistoryEntry,
        "RejectedObservation": m.RejectedObservation,
        "Configuration": m.Configuration,
        "SetConfigurationResponse": m.Written,
        "Webhook": m.Webhook,
        "CreateWebhookResponse": m.CreatedWebhook,
        "WebhookDeadLetter": m.WebhookDeadLetter,
        "RetryWebhookDeadLetterResponse": m.WebhookRetry,
        "Scope": m.Scope,
        "CloneSessionResponse": m.ClonedSession,
        "UploadFileResponse": m.AddedMessages,
    }.items()
}
_TIMESTAMP, _STRUCT = "google.protobuf.Timestamp", "google.protobuf.Struct"


def to_model(message: Proto) -> Any:
    """The dataclass that mirrors `message`, every field converted."""
    model = MODEL_OF[message.DESCRIPTOR.full_name]
    return model(**{f.name: _value(message, f) for f in _wire_fields(model, message.DESCRIPTOR)})


def field_of(name: str):
    """A converter taking one field of a response, e.g. field_of("peer") for GetOrCreatePeerResponse."""
    return lambda message: _value(message, message.DESCRIPTOR.fields_by_name[name])


def page_of(name: str):
    """A converter from a list response to a Page of its `name` items."""
    return lambda message: m.Page(tuple(to_model(x) for x in getattr(message, name)), message.next_page_token)


def items_of(name: str):
    """A converter from a response to the tuple of its `name` items."""
    return lambda message: tuple(to_model(x) for x in getattr(message, name))


def search_hits(message: Proto) -> m.SearchHits:
    """A SearchMessages reply as its hits, with the reply's `truncated`."""
    return m.SearchHits(items_of("results")(message), message.truncated)


def effective_configuration(message: Proto) -> m.EffectiveConfiguration:
    """An EffectiveConfiguration reply as typed values (its levels map by setting name)."""
    level = message.DESCRIPTOR.fields_by_name["levels"].message_type.fields_by_name["value"].enum_type
    return m.EffectiveConfiguration(
        values=to_model(message.values),
        levels={name: _enum_label(level, number) for name, number in message.levels.items()},
    )


def with_assistant(context: m.Context, assistant_peer_id: str) -> m.Context:
    return dataclasses.replace(context, assistant_peer_id=assistant_peer_id)


def in_time_zone(context: m.Context, time_zone: str) -> m.Context:
    """`context` with its relevant messages' times in `time_zone`, so system_text() heads them by the
    asker's days and hours, as the server counted them."""
    try:
        zone = ZoneInfo(time_zone) if time_zone else None
    except (ZoneInfoNotFoundError, ValueError):  # the server took the name; this machine lacks its rules
        zone = None
    if zone is None:
        return context
    relevant = tuple(
        dataclasses.replace(r, created_at=_in_zone(r.created_at, zone)) if r.created_at else r
        for r in context.relevant_messages
    )
    return dataclasses.replace(context, relevant_messages=relevant)


def _in_zone(when: datetime, zone: tzinfo) -> datetime:
    """`when` in `zone`, or in UTC where the zone's offset would carry it past the years a datetime holds
    (a message of 1 January of year 1 read west of UTC), as the server heads it."""
    try:
        return when.astimezone(zone)
    except (OverflowError, ValueError):
        return when.astimezone(UTC)


def log_position(p: Proto) -> m.LogPosition:
    return m.LogPosition(p.topic, p.partition, p.offset)


def log_event(e: Proto) -> m.LogEvent:
    return m.LogEvent(
        e.type,
        e.schema_version,
        e.event_id,
        e.key,
        log_position(e.position),
        json.loads(e.json),
        tuple(log_position(p) for p in e.cursor.positions),
    )


def chat_event(chunk: Proto) -> m.ChatEvent | None:
    """The chunk's event; None for a kind a newer server sends that this client does not know (skipped)."""
    kind = chunk.WhichOneof("event")
    if kind is None:
        return None
    if kind == "text":
        return m.ChatText(chunk.text)
    if kind == "discard_text":
        return m.DiscardText()
    return to_model(getattr(chunk, kind))


@cache
def _wire_fields(model: type, descriptor: Descriptor) -> tuple[FieldDescriptor, ...]:
    return tuple(descriptor.fields_by_name[f.name] for f in dataclasses.fields(model) if not f.metadata.get("local"))


def _value(message: Proto, fd: FieldDescriptor) -> Any:
    value = getattr(message, fd.name)
    if fd.is_repeated:
        return tuple(_one(fd, v) for v in value)
    if fd.message_type is not None and fd.message_type.full_name == _STRUCT:
        return json_format.MessageToDict(value)  # unset: {}
    if fd.has_presence and not message.HasField(fd.name):
        return None
    return _one(fd, value)


def _one(fd: FieldDescriptor, value: Any) -> Any:
    if fd.enum_type is not None:
        return _enum_label(fd.enum_type, value)
    if fd.message_type is None:
        return value
    if fd.message_type.full_name == _TIMESTAMP:
        return value.ToDatetime(tzinfo=UTC)
    return to_model(value)


def _enum_label(enum_type, number: int) -> str:
    """An enum's value by name ("deductive"); "unknown_<n>" for a number a newer server sends that this
    client does not know (it raised KeyError, past `except PeerlogError`, and broke every read holding one)."""
    known = enum_type.values_by_number.get(number)
    return _enum_name(known.name, enum_type.name) if known is not None else f"unknown_{number}"


def _enum_name(value_name: str, enum_name: str) -> str:
    return value_name.removeprefix(_prefix(enum_name)).lower()


def _prefix(enum_name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", enum_name).upper() + "_"  # ObservationLevel -> OBSERVATION_LEVEL_


def enum_value(enum: Any, enum_name: str, name: str) -> int:
    """The number of `name` ("explicit") in an enum; ValueError naming the choices otherwise."""
    prefix = _prefix(enum_name)
    try:
        return enum.Value(prefix + name.upper())
    except ValueError:
        choices = [n.removeprefix(prefix).lower() for n in enum.keys() if not n.endswith("_UNSPECIFIED")]
        raise ValueError(f"{name!r} is not one of {', '.join(choices)}") from None


# ---- the other way ----------------------------------------------------------------------------------


def timestamp(when: datetime | None) -> timestamp_pb2.Timestamp | None:
    """A Timestamp for a datetime (naive: taken as UTC); None stays unset."""
    if when is None:
        return None
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(when if when.tzinfo else when.replace(tzinfo=UTC))
    return out


def configuration(level: m.Configuration | None, proto: type) -> Any:
    """The `proto` Configuration message of a level (its None settings left unset); None stays unset."""
    if level is None:
        return None
    return proto(
        **{f.name: getattr(level, f.name) for f in dataclasses.fields(level) if getattr(level, f.name) is not None}
    )


def struct(data: Mapping[str, Any] | None) -> struct_pb2.Struct | None:
    if data is None:
        return None
    out = struct_pb2.Struct()
    out.update(data)
    return out


def ids(values: Iterable[Any]) -> list[str]:
    """Ids from strings or handles (anything with an `id`)."""
    return [id_of(v) for v in values]


def id_of(value: Any) -> str:
    """An id from a string or a handle; None: "" (the server's default, e.g. the observer itself)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else value.id
