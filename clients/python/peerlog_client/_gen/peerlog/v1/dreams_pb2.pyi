import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from peerlog_client._gen.peerlog.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScheduleDreamRequest(_message.Message):
    __slots__ = ("workspace_id", "observer_id", "observed_id", "reason")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observer_id: str
    observed_id: str
    reason: str
    def __init__(self, workspace_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ScheduleDreamResponse(_message.Message):
    __slots__ = ("consistency_token",)
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    consistency_token: str
    def __init__(self, consistency_token: _Optional[str] = ...) -> None: ...

class ListDreamsRequest(_message.Message):
    __slots__ = ("workspace_id", "observer_id", "observed_id", "limit", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observer_id: str
    observed_id: str
    limit: int
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., limit: _Optional[int] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class Dream(_message.Message):
    __slots__ = ("dream_id", "observer_id", "observed_id", "reason", "new_explicit", "state", "edits", "error", "requested_at", "started_at", "finished_at")
    DREAM_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NEW_EXPLICIT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EDITS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    dream_id: str
    observer_id: str
    observed_id: str
    reason: str
    new_explicit: int
    state: str
    edits: int
    error: str
    requested_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    def __init__(self, dream_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., reason: _Optional[str] = ..., new_explicit: _Optional[int] = ..., state: _Optional[str] = ..., edits: _Optional[int] = ..., error: _Optional[str] = ..., requested_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListDreamsResponse(_message.Message):
    __slots__ = ("dreams",)
    DREAMS_FIELD_NUMBER: _ClassVar[int]
    dreams: _containers.RepeatedCompositeFieldContainer[Dream]
    def __init__(self, dreams: _Optional[_Iterable[_Union[Dream, _Mapping]]] = ...) -> None: ...
