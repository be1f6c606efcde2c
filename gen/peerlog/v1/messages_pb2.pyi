import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from peerlog.v1 import common_pb2 as _common_pb2
from peerlog.v1 import configuration_pb2 as _configuration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UploadFileRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "peer_id", "file_name", "idempotency_key", "data")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    peer_id: str
    file_name: str
    idempotency_key: str
    data: bytes
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., peer_id: _Optional[str] = ..., file_name: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class UploadFileResponse(_message.Message):
    __slots__ = ("message_ids", "consistency_token")
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    consistency_token: str
    def __init__(self, message_ids: _Optional[_Iterable[str]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class NewMessage(_message.Message):
    __slots__ = ("peer_id", "content", "created_at", "metadata", "message_id", "configuration")
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIGURATION_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    content: str
    created_at: _timestamp_pb2.Timestamp
    metadata: _struct_pb2.Struct
    message_id: str
    configuration: _configuration_pb2.Configuration
    def __init__(self, peer_id: _Optional[str] = ..., content: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., message_id: _Optional[str] = ..., configuration: _Optional[_Union[_configuration_pb2.Configuration, _Mapping]] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("workspace_id", "session_id", "message_id", "peer_id", "content", "created_at", "metadata", "seq", "origin", "author_name")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_NAME_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    message_id: str
    peer_id: str
    content: str
    created_at: _timestamp_pb2.Timestamp
    metadata: _struct_pb2.Struct
    seq: int
    origin: MessageOrigin
    author_name: str
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., message_id: _Optional[str] = ..., peer_id: _Optional[str] = ..., content: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., seq: _Optional[int] = ..., origin: _Optional[_Union[MessageOrigin, _Mapping]] = ..., author_name: _Optional[str] = ...) -> None: ...

class MessageOrigin(_message.Message):
    __slots__ = ("workspace_id", "session_id", "message_id")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    message_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class AddMessagesRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "messages", "idempotency_key")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    messages: _containers.RepeatedCompositeFieldContainer[NewMessage]
    idempotency_key: str
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[NewMessage, _Mapping]]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class AddMessagesResponse(_message.Message):
    __slots__ = ("message_ids", "consistency_token")
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    consistency_token: str
    def __init__(self, message_ids: _Optional[_Iterable[str]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class ListMessagesRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "page", "reverse", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    REVERSE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    page: _common_pb2.PageRequest
    reverse: bool
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ..., reverse: _Optional[bool] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class ListMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetMessageRequest(_message.Message):
    __slots__ = ("workspace_id", "message_id", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    message_id: str
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., message_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class ScoredMessage(_message.Message):
    __slots__ = ("message", "score", "previous", "next")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    message: Message
    score: float
    previous: Message
    next: Message
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., score: _Optional[float] = ..., previous: _Optional[_Union[Message, _Mapping]] = ..., next: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class SearchMessagesResponse(_message.Message):
    __slots__ = ("results", "embedding_model", "truncated")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ScoredMessage]
    embedding_model: str
    truncated: bool
    def __init__(self, results: _Optional[_Iterable[_Union[ScoredMessage, _Mapping]]] = ..., embedding_model: _Optional[str] = ..., truncated: _Optional[bool] = ...) -> None: ...
