import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from peerlog.v1 import common_pb2 as _common_pb2
from peerlog.v1 import messages_pb2 as _messages_pb2
from peerlog.v1 import observations_pb2 as _observations_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetProvenanceRequest(_message.Message):
    __slots__ = ("workspace_id", "observation_id", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observation_id: str
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., observation_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class SourceMessage(_message.Message):
    __slots__ = ("message_id", "span", "session_id", "peer_id", "content", "created_at", "origin")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    span: str
    session_id: str
    peer_id: str
    content: str
    created_at: _timestamp_pb2.Timestamp
    origin: _messages_pb2.MessageOrigin
    def __init__(self, message_id: _Optional[str] = ..., span: _Optional[str] = ..., session_id: _Optional[str] = ..., peer_id: _Optional[str] = ..., content: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., origin: _Optional[_Union[_messages_pb2.MessageOrigin, _Mapping]] = ...) -> None: ...

class ProvenanceNode(_message.Message):
    __slots__ = ("observation", "source_messages")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    observation: _observations_pb2.Observation
    source_messages: _containers.RepeatedCompositeFieldContainer[SourceMessage]
    def __init__(self, observation: _Optional[_Union[_observations_pb2.Observation, _Mapping]] = ..., source_messages: _Optional[_Iterable[_Union[SourceMessage, _Mapping]]] = ...) -> None: ...

class GetProvenanceResponse(_message.Message):
    __slots__ = ("root_id", "nodes", "missing_ids", "truncated")
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    MISSING_IDS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    root_id: str
    nodes: _containers.RepeatedCompositeFieldContainer[ProvenanceNode]
    missing_ids: _containers.RepeatedScalarFieldContainer[str]
    truncated: bool
    def __init__(self, root_id: _Optional[str] = ..., nodes: _Optional[_Iterable[_Union[ProvenanceNode, _Mapping]]] = ..., missing_ids: _Optional[_Iterable[str]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class GetObservationHistoryRequest(_message.Message):
    __slots__ = ("workspace_id", "observation_id", "consistency", "limit", "page_token")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observation_id: str
    consistency: _common_pb2.ReadConsistency
    limit: int
    page_token: str
    def __init__(self, workspace_id: _Optional[str] = ..., observation_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class Producer(_message.Message):
    __slots__ = ("component", "version", "model", "prompt_version")
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_VERSION_FIELD_NUMBER: _ClassVar[int]
    component: str
    version: str
    model: str
    prompt_version: str
    def __init__(self, component: _Optional[str] = ..., version: _Optional[str] = ..., model: _Optional[str] = ..., prompt_version: _Optional[str] = ...) -> None: ...

class HistoryEntry(_message.Message):
    __slots__ = ("event_id", "kind", "occurred_at", "producer", "causation_id", "detail")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OCCURRED_AT_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    CAUSATION_ID_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    kind: str
    occurred_at: _timestamp_pb2.Timestamp
    producer: Producer
    causation_id: str
    detail: _struct_pb2.Struct
    def __init__(self, event_id: _Optional[str] = ..., kind: _Optional[str] = ..., occurred_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., producer: _Optional[_Union[Producer, _Mapping]] = ..., causation_id: _Optional[str] = ..., detail: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class GetObservationHistoryResponse(_message.Message):
    __slots__ = ("entries", "next_page_token")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[HistoryEntry]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[HistoryEntry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListRejectedObservationsRequest(_message.Message):
    __slots__ = ("workspace_id", "observer_id", "observed_id", "dream_id", "limit", "consistency", "page_token")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    DREAM_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observer_id: str
    observed_id: str
    dream_id: str
    limit: int
    consistency: _common_pb2.ReadConsistency
    page_token: str
    def __init__(self, workspace_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., dream_id: _Optional[str] = ..., limit: _Optional[int] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ..., page_token: _Optional[str] = ...) -> None: ...

class RejectedObservation(_message.Message):
    __slots__ = ("rejection_id", "observer_id", "observed_id", "level", "content", "reason", "sources", "premise_ids", "batch_id", "dream_id", "rejected_at")
    REJECTION_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    PREMISE_IDS_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    DREAM_ID_FIELD_NUMBER: _ClassVar[int]
    REJECTED_AT_FIELD_NUMBER: _ClassVar[int]
    rejection_id: str
    observer_id: str
    observed_id: str
    level: str
    content: str
    reason: str
    sources: _containers.RepeatedCompositeFieldContainer[_observations_pb2.ObservationSource]
    premise_ids: _containers.RepeatedScalarFieldContainer[str]
    batch_id: str
    dream_id: str
    rejected_at: _timestamp_pb2.Timestamp
    def __init__(self, rejection_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., level: _Optional[str] = ..., content: _Optional[str] = ..., reason: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[_observations_pb2.ObservationSource, _Mapping]]] = ..., premise_ids: _Optional[_Iterable[str]] = ..., batch_id: _Optional[str] = ..., dream_id: _Optional[str] = ..., rejected_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListRejectedObservationsResponse(_message.Message):
    __slots__ = ("rejections", "next_page_token")
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    rejections: _containers.RepeatedCompositeFieldContainer[RejectedObservation]
    next_page_token: str
    def __init__(self, rejections: _Optional[_Iterable[_Union[RejectedObservation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
