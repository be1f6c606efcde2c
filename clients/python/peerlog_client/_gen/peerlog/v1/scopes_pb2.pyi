import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from peerlog_client._gen.peerlog.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Scope(_message.Message):
    __slots__ = ("workspace_id", "scope_id", "name", "session_ids", "created_at")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    scope_id: str
    name: str
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, workspace_id: _Optional[str] = ..., scope_id: _Optional[str] = ..., name: _Optional[str] = ..., session_ids: _Optional[_Iterable[str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateScopeRequest(_message.Message):
    __slots__ = ("workspace_id", "scope_id", "name", "session_ids")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    scope_id: str
    name: str
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, workspace_id: _Optional[str] = ..., scope_id: _Optional[str] = ..., name: _Optional[str] = ..., session_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateScopeResponse(_message.Message):
    __slots__ = ("scope", "consistency_token")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    scope: Scope
    consistency_token: str
    def __init__(self, scope: _Optional[_Union[Scope, _Mapping]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class ListScopesRequest(_message.Message):
    __slots__ = ("workspace_id", "consistency", "page")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    consistency: _common_pb2.ReadConsistency
    page: _common_pb2.PageRequest
    def __init__(self, workspace_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ...) -> None: ...

class ListScopesResponse(_message.Message):
    __slots__ = ("scopes", "next_page_token")
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    scopes: _containers.RepeatedCompositeFieldContainer[Scope]
    next_page_token: str
    def __init__(self, scopes: _Optional[_Iterable[_Union[Scope, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetScopeRequest(_message.Message):
    __slots__ = ("workspace_id", "scope_id", "consistency", "as_of")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    scope_id: str
    consistency: _common_pb2.ReadConsistency
    as_of: _timestamp_pb2.Timestamp
    def __init__(self, workspace_id: _Optional[str] = ..., scope_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AddScopeSessionsRequest(_message.Message):
    __slots__ = ("workspace_id", "scope_id", "session_ids")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    scope_id: str
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, workspace_id: _Optional[str] = ..., scope_id: _Optional[str] = ..., session_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RemoveScopeSessionsRequest(_message.Message):
    __slots__ = ("workspace_id", "scope_id", "session_ids")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    scope_id: str
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, workspace_id: _Optional[str] = ..., scope_id: _Optional[str] = ..., session_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ScopeSessionsResponse(_message.Message):
    __slots__ = ("scope", "consistency_token")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    scope: Scope
    consistency_token: str
    def __init__(self, scope: _Optional[_Union[Scope, _Mapping]] = ..., consistency_token: _Optional[str] = ...) -> None: ...
