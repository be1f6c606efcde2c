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

class CloneSessionRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "new_session_id", "up_to_message_id", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    NEW_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    UP_TO_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    new_session_id: str
    up_to_message_id: str
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., new_session_id: _Optional[str] = ..., up_to_message_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class CloneSessionResponse(_message.Message):
    __slots__ = ("session", "message_ids", "consistency_token")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session: Session
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    consistency_token: str
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., message_ids: _Optional[_Iterable[str]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class MemberSpec(_message.Message):
    __slots__ = ("peer_id", "observe_me", "observe_others")
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_ME_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_OTHERS_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    observe_me: bool
    observe_others: bool
    def __init__(self, peer_id: _Optional[str] = ..., observe_me: _Optional[bool] = ..., observe_others: _Optional[bool] = ...) -> None: ...

class Membership(_message.Message):
    __slots__ = ("peer_id", "observe_me", "observe_others", "joined_at", "left_at")
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_ME_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_OTHERS_FIELD_NUMBER: _ClassVar[int]
    JOINED_AT_FIELD_NUMBER: _ClassVar[int]
    LEFT_AT_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    observe_me: bool
    observe_others: bool
    joined_at: _timestamp_pb2.Timestamp
    left_at: _timestamp_pb2.Timestamp
    def __init__(self, peer_id: _Optional[str] = ..., observe_me: _Optional[bool] = ..., observe_others: _Optional[bool] = ..., joined_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., left_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("workspace_id", "session_id", "metadata", "created_at", "memberships", "message_count", "membership_periods")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIPS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_PERIODS_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    metadata: _struct_pb2.Struct
    created_at: _timestamp_pb2.Timestamp
    memberships: _containers.RepeatedCompositeFieldContainer[Membership]
    message_count: int
    membership_periods: int
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., memberships: _Optional[_Iterable[_Union[Membership, _Mapping]]] = ..., message_count: _Optional[int] = ..., membership_periods: _Optional[int] = ...) -> None: ...

class GetOrCreateSessionRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "metadata", "members", "configuration")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    CONFIGURATION_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    metadata: _struct_pb2.Struct
    members: _containers.RepeatedCompositeFieldContainer[MemberSpec]
    configuration: _configuration_pb2.Configuration
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., members: _Optional[_Iterable[_Union[MemberSpec, _Mapping]]] = ..., configuration: _Optional[_Union[_configuration_pb2.Configuration, _Mapping]] = ...) -> None: ...

class GetOrCreateSessionResponse(_message.Message):
    __slots__ = ("session", "created", "consistency_token")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session: Session
    created: bool
    consistency_token: str
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., created: _Optional[bool] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class AddMembersRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "members")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    members: _containers.RepeatedCompositeFieldContainer[MemberSpec]
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[MemberSpec, _Mapping]]] = ...) -> None: ...

class RemoveMembersRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "peer_ids")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_IDS_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    peer_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., peer_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class MembershipResponse(_message.Message):
    __slots__ = ("session", "consistency_token")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session: Session
    consistency_token: str
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("workspace_id", "peer_id", "page", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    peer_id: str
    page: _common_pb2.PageRequest
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., peer_id: _Optional[str] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetSessionSummariesRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class SessionSummary(_message.Message):
    __slots__ = ("content", "last_message_id", "last_seq", "messages_covered", "token_count", "model", "created_at")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    LAST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_COVERED_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    content: str
    last_message_id: str
    last_seq: int
    messages_covered: int
    token_count: int
    model: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, content: _Optional[str] = ..., last_message_id: _Optional[str] = ..., last_seq: _Optional[int] = ..., messages_covered: _Optional[int] = ..., token_count: _Optional[int] = ..., model: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetSessionSummariesResponse(_message.Message):
    __slots__ = ("short_summary", "long_summary")
    SHORT_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    LONG_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    short_summary: SessionSummary
    long_summary: SessionSummary
    def __init__(self, short_summary: _Optional[_Union[SessionSummary, _Mapping]] = ..., long_summary: _Optional[_Union[SessionSummary, _Mapping]] = ...) -> None: ...

class SearchSessionMessagesRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "query", "author_peer_ids", "perspective_peer_id", "after", "before", "limit", "consistency", "include_adjacent", "rerank", "time_zone")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_PEER_IDS_FIELD_NUMBER: _ClassVar[int]
    PERSPECTIVE_PEER_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ADJACENT_FIELD_NUMBER: _ClassVar[int]
    RERANK_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    query: str
    author_peer_ids: _containers.RepeatedScalarFieldContainer[str]
    perspective_peer_id: str
    after: _timestamp_pb2.Timestamp
    before: _timestamp_pb2.Timestamp
    limit: int
    consistency: _common_pb2.ReadConsistency
    include_adjacent: bool
    rerank: bool
    time_zone: str
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., query: _Optional[str] = ..., author_peer_ids: _Optional[_Iterable[str]] = ..., perspective_peer_id: _Optional[str] = ..., after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., limit: _Optional[int] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ..., include_adjacent: _Optional[bool] = ..., rerank: _Optional[bool] = ..., time_zone: _Optional[str] = ...) -> None: ...
