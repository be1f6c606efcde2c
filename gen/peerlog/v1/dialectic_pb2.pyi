import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from peerlog.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReasoningLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REASONING_LEVEL_UNSPECIFIED: _ClassVar[ReasoningLevel]
    REASONING_LEVEL_MINIMAL: _ClassVar[ReasoningLevel]
    REASONING_LEVEL_LOW: _ClassVar[ReasoningLevel]
    REASONING_LEVEL_MEDIUM: _ClassVar[ReasoningLevel]
    REASONING_LEVEL_HIGH: _ClassVar[ReasoningLevel]
    REASONING_LEVEL_MAX: _ClassVar[ReasoningLevel]
REASONING_LEVEL_UNSPECIFIED: ReasoningLevel
REASONING_LEVEL_MINIMAL: ReasoningLevel
REASONING_LEVEL_LOW: ReasoningLevel
REASONING_LEVEL_MEDIUM: ReasoningLevel
REASONING_LEVEL_HIGH: ReasoningLevel
REASONING_LEVEL_MAX: ReasoningLevel

class ResponseFormat(_message.Message):
    __slots__ = ("json_schema", "json_schema_object")
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_OBJECT_FIELD_NUMBER: _ClassVar[int]
    json_schema: str
    json_schema_object: _struct_pb2.Struct
    def __init__(self, json_schema: _Optional[str] = ..., json_schema_object: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ChatRequest(_message.Message):
    __slots__ = ("workspace_id", "observer_id", "target_id", "query", "session_id", "reasoning_level", "response_format", "consistency", "as_of", "scope_id", "perspective_peer_id", "time_zone")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASONING_LEVEL_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    PERSPECTIVE_PEER_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observer_id: str
    target_id: str
    query: str
    session_id: str
    reasoning_level: ReasoningLevel
    response_format: ResponseFormat
    consistency: _common_pb2.ReadConsistency
    as_of: _timestamp_pb2.Timestamp
    scope_id: str
    perspective_peer_id: str
    time_zone: str
    def __init__(self, workspace_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., target_id: _Optional[str] = ..., query: _Optional[str] = ..., session_id: _Optional[str] = ..., reasoning_level: _Optional[_Union[ReasoningLevel, str]] = ..., response_format: _Optional[_Union[ResponseFormat, _Mapping]] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., scope_id: _Optional[str] = ..., perspective_peer_id: _Optional[str] = ..., time_zone: _Optional[str] = ...) -> None: ...

class ChatResponse(_message.Message):
    __slots__ = ("answer", "cited_observation_ids", "cited_message_ids", "tool_rounds", "model", "abstained", "prompt_version")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CITED_OBSERVATION_IDS_FIELD_NUMBER: _ClassVar[int]
    CITED_MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    TOOL_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ABSTAINED_FIELD_NUMBER: _ClassVar[int]
    PROMPT_VERSION_FIELD_NUMBER: _ClassVar[int]
    answer: str
    cited_observation_ids: _containers.RepeatedScalarFieldContainer[str]
    cited_message_ids: _containers.RepeatedScalarFieldContainer[str]
    tool_rounds: int
    model: str
    abstained: bool
    prompt_version: str
    def __init__(self, answer: _Optional[str] = ..., cited_observation_ids: _Optional[_Iterable[str]] = ..., cited_message_ids: _Optional[_Iterable[str]] = ..., tool_rounds: _Optional[int] = ..., model: _Optional[str] = ..., abstained: _Optional[bool] = ..., prompt_version: _Optional[str] = ...) -> None: ...

class ToolProgress(_message.Message):
    __slots__ = ("round", "tool", "arguments", "results")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    round: int
    tool: str
    arguments: str
    results: int
    def __init__(self, round: _Optional[int] = ..., tool: _Optional[str] = ..., arguments: _Optional[str] = ..., results: _Optional[int] = ...) -> None: ...

class ChatChunk(_message.Message):
    __slots__ = ("text", "tool", "done", "discard_text")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    DISCARD_TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    tool: ToolProgress
    done: ChatResponse
    discard_text: bool
    def __init__(self, text: _Optional[str] = ..., tool: _Optional[_Union[ToolProgress, _Mapping]] = ..., done: _Optional[_Union[ChatResponse, _Mapping]] = ..., discard_text: _Optional[bool] = ...) -> None: ...
