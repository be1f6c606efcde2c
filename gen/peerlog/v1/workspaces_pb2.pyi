import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from peerlog.v1 import common_pb2 as _common_pb2
from peerlog.v1 import configuration_pb2 as _configuration_pb2
from peerlog.v1 import messages_pb2 as _messages_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Workspace(_message.Message):
    __slots__ = ("workspace_id", "metadata", "created_at")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    metadata: _struct_pb2.Struct
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, workspace_id: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetOrCreateWorkspaceRequest(_message.Message):
    __slots__ = ("workspace_id", "metadata", "configuration")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CONFIGURATION_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    metadata: _struct_pb2.Struct
    configuration: _configuration_pb2.Configuration
    def __init__(self, workspace_id: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., configuration: _Optional[_Union[_configuration_pb2.Configuration, _Mapping]] = ...) -> None: ...

class GetOrCreateWorkspaceResponse(_message.Message):
    __slots__ = ("workspace", "created", "consistency_token")
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workspace: Workspace
    created: bool
    consistency_token: str
    def __init__(self, workspace: _Optional[_Union[Workspace, _Mapping]] = ..., created: _Optional[bool] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class GetWorkspaceRequest(_message.Message):
    __slots__ = ("workspace_id", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class ListWorkspacesRequest(_message.Message):
    __slots__ = ("page", "consistency")
    PAGE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    page: _common_pb2.PageRequest
    consistency: _common_pb2.ReadConsistency
    def __init__(self, page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class ListWorkspacesResponse(_message.Message):
    __slots__ = ("workspaces", "next_page_token")
    WORKSPACES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workspaces: _containers.RepeatedCompositeFieldContainer[Workspace]
    next_page_token: str
    def __init__(self, workspaces: _Optional[_Iterable[_Union[Workspace, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SearchWorkspaceMessagesRequest(_message.Message):
    __slots__ = ("workspace_id", "query", "session_ids", "author_peer_ids", "perspective_peer_id", "after", "before", "limit", "consistency", "include_adjacent", "scope_id", "rerank", "time_zone")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_PEER_IDS_FIELD_NUMBER: _ClassVar[int]
    PERSPECTIVE_PEER_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ADJACENT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    RERANK_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    query: str
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    author_peer_ids: _containers.RepeatedScalarFieldContainer[str]
    perspective_peer_id: str
    after: _timestamp_pb2.Timestamp
    before: _timestamp_pb2.Timestamp
    limit: int
    consistency: _common_pb2.ReadConsistency
    include_adjacent: bool
    scope_id: str
    rerank: bool
    time_zone: str
    def __init__(self, workspace_id: _Optional[str] = ..., query: _Optional[str] = ..., session_ids: _Optional[_Iterable[str]] = ..., author_peer_ids: _Optional[_Iterable[str]] = ..., perspective_peer_id: _Optional[str] = ..., after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., limit: _Optional[int] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ..., include_adjacent: _Optional[bool] = ..., scope_id: _Optional[str] = ..., rerank: _Optional[bool] = ..., time_zone: _Optional[str] = ...) -> None: ...
