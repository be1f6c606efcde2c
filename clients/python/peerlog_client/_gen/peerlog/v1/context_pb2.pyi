import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from peerlog_client._gen.peerlog.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetRepresentationRequest(_message.Message):
    __slots__ = ("workspace_id", "observer_id", "target_id", "search_query", "search_top_k", "search_max_distance", "include_most_reinforced", "max_observations", "consistency", "session_ids", "as_of", "scope_id")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    SEARCH_QUERY_FIELD_NUMBER: _ClassVar[int]
    SEARCH_TOP_K_FIELD_NUMBER: _ClassVar[int]
    SEARCH_MAX_DISTANCE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_MOST_REINFORCED_FIELD_NUMBER: _ClassVar[int]
    MAX_OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observer_id: str
    target_id: str
    search_query: str
    search_top_k: int
    search_max_distance: float
    include_most_reinforced: bool
    max_observations: int
    consistency: _common_pb2.ReadConsistency
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    as_of: _timestamp_pb2.Timestamp
    scope_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., target_id: _Optional[str] = ..., search_query: _Optional[str] = ..., search_top_k: _Optional[int] = ..., search_max_distance: _Optional[float] = ..., include_most_reinforced: _Optional[bool] = ..., max_observations: _Optional[int] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ..., session_ids: _Optional[_Iterable[str]] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., scope_id: _Optional[str] = ...) -> None: ...

class GetRepresentationResponse(_message.Message):
    __slots__ = ("observations", "markdown", "truncated")
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    MARKDOWN_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    observations: _containers.RepeatedCompositeFieldContainer[ContextObservation]
    markdown: str
    truncated: bool
    def __init__(self, observations: _Optional[_Iterable[_Union[ContextObservation, _Mapping]]] = ..., markdown: _Optional[str] = ..., truncated: _Optional[bool] = ...) -> None: ...

class GetContextRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "token_budget", "include_summary", "observer_id", "target_id", "search_query", "search_top_k", "search_max_distance", "include_most_reinforced", "max_observations", "assistant_peer_id", "consistency", "session_ids", "as_of", "scope_id", "perspective_peer_id", "time_zone")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    SEARCH_QUERY_FIELD_NUMBER: _ClassVar[int]
    SEARCH_TOP_K_FIELD_NUMBER: _ClassVar[int]
    SEARCH_MAX_DISTANCE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_MOST_REINFORCED_FIELD_NUMBER: _ClassVar[int]
    MAX_OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_PEER_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    PERSPECTIVE_PEER_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    token_budget: int
    include_summary: bool
    observer_id: str
    target_id: str
    search_query: str
    search_top_k: int
    search_max_distance: float
    include_most_reinforced: bool
    max_observations: int
    assistant_peer_id: str
    consistency: _common_pb2.ReadConsistency
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    as_of: _timestamp_pb2.Timestamp
    scope_id: str
    perspective_peer_id: str
    time_zone: str
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., token_budget: _Optional[int] = ..., include_summary: _Optional[bool] = ..., observer_id: _Optional[str] = ..., target_id: _Optional[str] = ..., search_query: _Optional[str] = ..., search_top_k: _Optional[int] = ..., search_max_distance: _Optional[float] = ..., include_most_reinforced: _Optional[bool] = ..., max_observations: _Optional[int] = ..., assistant_peer_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ..., session_ids: _Optional[_Iterable[str]] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., scope_id: _Optional[str] = ..., perspective_peer_id: _Optional[str] = ..., time_zone: _Optional[str] = ...) -> None: ...

class ContextObservation(_message.Message):
    __slots__ = ("observation_id", "level", "content", "created_at", "session_id", "times_derived", "premises", "confidence", "pattern_type")
    OBSERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TIMES_DERIVED_FIELD_NUMBER: _ClassVar[int]
    PREMISES_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    observation_id: str
    level: str
    content: str
    created_at: _timestamp_pb2.Timestamp
    session_id: str
    times_derived: int
    premises: _containers.RepeatedCompositeFieldContainer[ContextPremise]
    confidence: str
    pattern_type: str
    def __init__(self, observation_id: _Optional[str] = ..., level: _Optional[str] = ..., content: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., session_id: _Optional[str] = ..., times_derived: _Optional[int] = ..., premises: _Optional[_Iterable[_Union[ContextPremise, _Mapping]]] = ..., confidence: _Optional[str] = ..., pattern_type: _Optional[str] = ...) -> None: ...

class ContextPremise(_message.Message):
    __slots__ = ("observation_id", "level", "content")
    OBSERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    observation_id: str
    level: str
    content: str
    def __init__(self, observation_id: _Optional[str] = ..., level: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class ContextMessage(_message.Message):
    __slots__ = ("message_id", "peer_id", "content", "author_name")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_NAME_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    peer_id: str
    content: str
    author_name: str
    def __init__(self, message_id: _Optional[str] = ..., peer_id: _Optional[str] = ..., content: _Optional[str] = ..., author_name: _Optional[str] = ...) -> None: ...

class RelevantMessage(_message.Message):
    __slots__ = ("message_id", "peer_id", "session_id", "content", "created_at", "score", "author_name")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_NAME_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    peer_id: str
    session_id: str
    content: str
    created_at: _timestamp_pb2.Timestamp
    score: float
    author_name: str
    def __init__(self, message_id: _Optional[str] = ..., peer_id: _Optional[str] = ..., session_id: _Optional[str] = ..., content: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., score: _Optional[float] = ..., author_name: _Optional[str] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "name")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    name: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class TokenCounts(_message.Message):
    __slots__ = ("representation", "card", "summary", "messages", "total", "relevant_messages")
    REPRESENTATION_FIELD_NUMBER: _ClassVar[int]
    CARD_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    RELEVANT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    representation: int
    card: int
    summary: int
    messages: int
    total: int
    relevant_messages: int
    def __init__(self, representation: _Optional[int] = ..., card: _Optional[int] = ..., summary: _Optional[int] = ..., messages: _Optional[int] = ..., total: _Optional[int] = ..., relevant_messages: _Optional[int] = ...) -> None: ...

class GetContextResponse(_message.Message):
    __slots__ = ("observations", "representation", "peer_card", "summary_kind", "summary", "messages", "tokens", "chat_messages", "relevant_messages")
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    REPRESENTATION_FIELD_NUMBER: _ClassVar[int]
    PEER_CARD_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_KIND_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHAT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RELEVANT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    observations: _containers.RepeatedCompositeFieldContainer[ContextObservation]
    representation: str
    peer_card: _containers.RepeatedScalarFieldContainer[str]
    summary_kind: str
    summary: str
    messages: _containers.RepeatedCompositeFieldContainer[ContextMessage]
    tokens: TokenCounts
    chat_messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    relevant_messages: _containers.RepeatedCompositeFieldContainer[RelevantMessage]
    def __init__(self, observations: _Optional[_Iterable[_Union[ContextObservation, _Mapping]]] = ..., representation: _Optional[str] = ..., peer_card: _Optional[_Iterable[str]] = ..., summary_kind: _Optional[str] = ..., summary: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ContextMessage, _Mapping]]] = ..., tokens: _Optional[_Union[TokenCounts, _Mapping]] = ..., chat_messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., relevant_messages: _Optional[_Iterable[_Union[RelevantMessage, _Mapping]]] = ...) -> None: ...
