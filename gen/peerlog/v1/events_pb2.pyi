from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LogPosition(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class EventCursor(_message.Message):
    __slots__ = ("positions",)
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    positions: _containers.RepeatedCompositeFieldContainer[LogPosition]
    def __init__(self, positions: _Optional[_Iterable[_Union[LogPosition, _Mapping]]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("workspace_id", "event_types", "cursor", "from_end")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    FROM_END_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    event_types: _containers.RepeatedScalarFieldContainer[str]
    cursor: EventCursor
    from_end: bool
    def __init__(self, workspace_id: _Optional[str] = ..., event_types: _Optional[_Iterable[str]] = ..., cursor: _Optional[_Union[EventCursor, _Mapping]] = ..., from_end: _Optional[bool] = ...) -> None: ...

class SubscribedEvent(_message.Message):
    __slots__ = ("type", "schema_version", "event_id", "key", "position", "json", "cursor")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    type: str
    schema_version: int
    event_id: str
    key: str
    position: LogPosition
    json: str
    cursor: EventCursor
    def __init__(self, type: _Optional[str] = ..., schema_version: _Optional[int] = ..., event_id: _Optional[str] = ..., key: _Optional[str] = ..., position: _Optional[_Union[LogPosition, _Mapping]] = ..., json: _Optional[str] = ..., cursor: _Optional[_Union[EventCursor, _Mapping]] = ...) -> None: ...
