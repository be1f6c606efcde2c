"""The event envelope, the type registry and the wire format (orjson)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar

import orjson
import uuid_utils
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

_REGISTRY: dict[str, type[Event]] = {}


def new_id() -> str:
    """A fresh UUIDv7 as text (event, message, observation and other ids): unique, sortable by creation
    time, and its time the clock's. uuid_utils orders the ids of one millisecond by a counter; uuid6,
    used before, moved the timestamp 1 ms ahead for each instead, so ids made at ingest's rate (20,000 a
    second) ran minutes ahead of the clock, and cost 4 µs each where these cost 0.3."""
    return str(uuid_utils.uuid7())


def utcnow() -> datetime:
    return datetime.now(UTC)


class ProducerInfo(BaseModel):
    """Which component (and, for model output, which model and prompt) wrote an event."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    component: str
    version: str
    model: str | None = None
    prompt_version: str | None = None


class EventDecodeError(ValueError):
    """A record on the log is not an event this code can read."""


class NewerEvent(EventDecodeError):
    """An event a newer version of peerlog wrote: of a type, or a schema version, this code does not know."""

    def __init__(self, message: str, type_name: str) -> None:
        super().__init__(message)
        self.type_name = type_name  # what the record says it is


class UnknownEventType(NewerEvent):
    pass


class UnsupportedSchemaVersion(NewerEvent):
    pass


class Event(BaseModel):
    """Envelope shared by every event. Subclasses add their payload fields.

    `key` is derived from the fields named in `key_fields` (workspace first), so the partition key
    is declared once, next to the event, and can never disagree with the payload.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_fields: ClassVar[tuple[str, ...]] = ("workspace_id",)
    schema_version_current: ClassVar[int] = 1
    # version -> function upgrading a payload dict of that version by one step
    upcasters: ClassVar[dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {}

    event_id: str = Field(default_factory=new_id)
    type: str
    schema_version: int = 1
    occurred_at: AwareDatetime = Field(default_factory=utcnow)
    key: str = ""
    causation_id: str | None = None
    producer: ProducerInfo
    workspace_id: str

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("abstract", False):  # shared bases are not event types
            _REGISTRY[cls.__name__] = cls

    @model_validator(mode="before")
    @classmethod
    def _fill_envelope(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        data.setdefault("type", cls.__name__)
        data.setdefault("schema_version", cls.schema_version_current)
        expected = "/".join(str(data.get(f, "")) for f in cls.key_fields)
        if data.setdefault("key", expected) != expected:
            raise ValueError(f"key {data['key']!r} does not match payload key {expected!r}")
        if data["type"] != cls.__name__:
            raise ValueError(f"type {data['type']!r} given to {cls.__name__}")
        return data


def event_types() -> dict[str, type[Event]]:
    """Every event type known to this code, by name."""
    return dict(_REGISTRY)


def encode(event: Event) -> bytes:
    """Serialise an event for the log."""
    return orjson.dumps(event.model_dump(mode="python"))


def decode(raw: bytes) -> Event:
    """Parse a log record into its event type, upcasting old schema versions.

    Raises EventDecodeError (or a subclass) for anything that is not a known, readable event, so the
    caller can stop or park the record instead of guessing.
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise EventDecodeError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise EventDecodeError("record has no event type")
    cls = _REGISTRY.get(data["type"])
    if cls is None:
        raise UnknownEventType(f"unknown event type {data['type']!r}", data["type"])
    data = _upcast(cls, data)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise EventDecodeError(f"invalid {cls.__name__}: {exc}") from exc


def _upcast(cls: type[Event], data: dict[str, Any]) -> dict[str, Any]:
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:  # damaged, not newer
        raise EventDecodeError(f"{cls.__name__} schema_version {version!r} is not a version number")
    if version > cls.schema_version_current:
        raise UnsupportedSchemaVersion(
            f"{cls.__name__} schema_version {version!r} is newer than this code "
            f"({cls.schema_version_current}); upgrade peerlog before reading it",
            cls.__name__,
        )
    while version < cls.schema_version_current:
        data = cls.upcasters[version](data)
        version += 1
        data["schema_version"] = version
    return data
