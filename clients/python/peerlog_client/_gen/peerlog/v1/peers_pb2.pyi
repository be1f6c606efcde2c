import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from peerlog_client._gen.peerlog.v1 import audit_pb2 as _audit_pb2
from peerlog_client._gen.peerlog.v1 import common_pb2 as _common_pb2
from peerlog_client._gen.peerlog.v1 import messages_pb2 as _messages_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PeerCard(_message.Message):
    __slots__ = ("workspace_id", "observer_id", "observed_id", "entries", "updated_at", "producer", "dream_id")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    DREAM_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observer_id: str
    observed_id: str
    entries: _containers.RepeatedScalarFieldContainer[str]
    updated_at: _timestamp_pb2.Timestamp
    producer: _audit_pb2.Producer
    dream_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., entries: _Optional[_Iterable[str]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., producer: _Optional[_Union[_audit_pb2.Producer, _Mapping]] = ..., dream_id: _Optional[str] = ...) -> None: ...

class GetPeerCardRequest(_message.Message):
    __slots__ = ("workspace_id", "observer_id", "observed_id", "consistency", "as_of")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observer_id: str
    observed_id: str
    consistency: _common_pb2.ReadConsistency
    as_of: _timestamp_pb2.Timestamp
    def __init__(self, workspace_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SetPeerCardRequest(_message.Message):
    __slots__ = ("workspace_id", "observer_id", "observed_id", "entries")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observer_id: str
    observed_id: str
    entries: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, workspace_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., entries: _Optional[_Iterable[str]] = ...) -> None: ...

class SetPeerCardResponse(_message.Message):
    __slots__ = ("card", "consistency_token")
    CARD_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    card: PeerCard
    consistency_token: str
    def __init__(self, card: _Optional[_Union[PeerCard, _Mapping]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class Peer(_message.Message):
    __slots__ = ("workspace_id", "peer_id", "observe_me", "metadata", "created_at")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_ME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    peer_id: str
    observe_me: bool
    metadata: _struct_pb2.Struct
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, workspace_id: _Optional[str] = ..., peer_id: _Optional[str] = ..., observe_me: _Optional[bool] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetOrCreatePeerRequest(_message.Message):
    __slots__ = ("workspace_id", "peer_id", "observe_me", "metadata")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_ME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    peer_id: str
    observe_me: bool
    metadata: _struct_pb2.Struct
    def __init__(self, workspace_id: _Optional[str] = ..., peer_id: _Optional[str] = ..., observe_me: _Optional[bool] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class GetOrCreatePeerResponse(_message.Message):
    __slots__ = ("peer", "created", "consistency_token")
    PEER_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    peer: Peer
    created: bool
    consistency_token: str
    def __init__(self, peer: _Optional[_Union[Peer, _Mapping]] = ..., created: _Optional[bool] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class SetPeerMetadataRequest(_message.Message):
    __slots__ = ("workspace_id", "peer_id", "metadata")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    peer_id: str
    metadata: _struct_pb2.Struct
    def __init__(self, workspace_id: _Optional[str] = ..., peer_id: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class SetPeerMetadataResponse(_message.Message):
    __slots__ = ("peer", "consistency_token")
    PEER_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    peer: Peer
    consistency_token: str
    def __init__(self, peer: _Optional[_Union[Peer, _Mapping]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class GetPeerRequest(_message.Message):
    __slots__ = ("workspace_id", "peer_id", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    peer_id: str
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., peer_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class ListPeersRequest(_message.Message):
    __slots__ = ("workspace_id", "page", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    page: _common_pb2.PageRequest
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class ListPeersResponse(_message.Message):
    __slots__ = ("peers", "next_page_token")
    PEERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    peers: _containers.RepeatedCompositeFieldContainer[Peer]
    next_page_token: str
    def __init__(self, peers: _Optional[_Iterable[_Union[Peer, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SearchPeerMessagesRequest(_message.Message):
    __slots__ = ("workspace_id", "peer_id", "query", "session_ids", "perspective_peer_id", "after", "before", "limit", "consistency", "include_adjacent", "scope_id", "rerank", "time_zone")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
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
    peer_id: str
    query: str
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    perspective_peer_id: str
    after: _timestamp_pb2.Timestamp
    before: _timestamp_pb2.Timestamp
    limit: int
    consistency: _common_pb2.ReadConsistency
    include_adjacent: bool
    scope_id: str
    rerank: bool
    time_zone: str
    def __init__(self, workspace_id: _Optional[str] = ..., peer_id: _Optional[str] = ..., query: _Optional[str] = ..., session_ids: _Optional[_Iterable[str]] = ..., perspective_peer_id: _Optional[str] = ..., after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., limit: _Optional[int] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ..., include_adjacent: _Optional[bool] = ..., scope_id: _Optional[str] = ..., rerank: _Optional[bool] = ..., time_zone: _Optional[str] = ...) -> None: ...
