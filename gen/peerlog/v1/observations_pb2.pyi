import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from peerlog.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ObservationLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OBSERVATION_LEVEL_UNSPECIFIED: _ClassVar[ObservationLevel]
    OBSERVATION_LEVEL_EXPLICIT: _ClassVar[ObservationLevel]
    OBSERVATION_LEVEL_DEDUCTIVE: _ClassVar[ObservationLevel]
    OBSERVATION_LEVEL_INDUCTIVE: _ClassVar[ObservationLevel]
    OBSERVATION_LEVEL_CONTRADICTION: _ClassVar[ObservationLevel]
OBSERVATION_LEVEL_UNSPECIFIED: ObservationLevel
OBSERVATION_LEVEL_EXPLICIT: ObservationLevel
OBSERVATION_LEVEL_DEDUCTIVE: ObservationLevel
OBSERVATION_LEVEL_INDUCTIVE: ObservationLevel
OBSERVATION_LEVEL_CONTRADICTION: ObservationLevel

class ObservationSource(_message.Message):
    __slots__ = ("message_id", "span")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    span: str
    def __init__(self, message_id: _Optional[str] = ..., span: _Optional[str] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("workspace_id", "observation_id", "observer_id", "observed_id", "level", "content", "session_id", "confidence", "times_derived", "created_at", "superseded_by", "superseded_at", "deleted_at", "delete_reason", "sources", "premise_ids", "pattern_type", "premise_superseded_at", "dream_id", "derivation", "source_count")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    TIMES_DERIVED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_BY_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_AT_FIELD_NUMBER: _ClassVar[int]
    DELETED_AT_FIELD_NUMBER: _ClassVar[int]
    DELETE_REASON_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    PREMISE_IDS_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    PREMISE_SUPERSEDED_AT_FIELD_NUMBER: _ClassVar[int]
    DREAM_ID_FIELD_NUMBER: _ClassVar[int]
    DERIVATION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observation_id: str
    observer_id: str
    observed_id: str
    level: ObservationLevel
    content: str
    session_id: str
    confidence: str
    times_derived: int
    created_at: _timestamp_pb2.Timestamp
    superseded_by: str
    superseded_at: _timestamp_pb2.Timestamp
    deleted_at: _timestamp_pb2.Timestamp
    delete_reason: str
    sources: _containers.RepeatedCompositeFieldContainer[ObservationSource]
    premise_ids: _containers.RepeatedScalarFieldContainer[str]
    pattern_type: str
    premise_superseded_at: _timestamp_pb2.Timestamp
    dream_id: str
    derivation: str
    source_count: int
    def __init__(self, workspace_id: _Optional[str] = ..., observation_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., level: _Optional[_Union[ObservationLevel, str]] = ..., content: _Optional[str] = ..., session_id: _Optional[str] = ..., confidence: _Optional[str] = ..., times_derived: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., superseded_by: _Optional[str] = ..., superseded_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deleted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delete_reason: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[ObservationSource, _Mapping]]] = ..., premise_ids: _Optional[_Iterable[str]] = ..., pattern_type: _Optional[str] = ..., premise_superseded_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., dream_id: _Optional[str] = ..., derivation: _Optional[str] = ..., source_count: _Optional[int] = ...) -> None: ...

class ListObservationsRequest(_message.Message):
    __slots__ = ("workspace_id", "observer_id", "observed_id", "levels", "session_id", "include_superseded", "include_deleted", "page", "reverse", "consistency", "derivation", "as_of")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DELETED_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    REVERSE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    DERIVATION_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observer_id: str
    observed_id: str
    levels: _containers.RepeatedScalarFieldContainer[ObservationLevel]
    session_id: str
    include_superseded: bool
    include_deleted: bool
    page: _common_pb2.PageRequest
    reverse: bool
    consistency: _common_pb2.ReadConsistency
    derivation: str
    as_of: _timestamp_pb2.Timestamp
    def __init__(self, workspace_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., levels: _Optional[_Iterable[_Union[ObservationLevel, str]]] = ..., session_id: _Optional[str] = ..., include_superseded: _Optional[bool] = ..., include_deleted: _Optional[bool] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ..., reverse: _Optional[bool] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ..., derivation: _Optional[str] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListObservationsResponse(_message.Message):
    __slots__ = ("observations", "next_page_token")
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    observations: _containers.RepeatedCompositeFieldContainer[Observation]
    next_page_token: str
    def __init__(self, observations: _Optional[_Iterable[_Union[Observation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetObservationRequest(_message.Message):
    __slots__ = ("workspace_id", "observation_id", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observation_id: str
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., observation_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class SearchObservationsRequest(_message.Message):
    __slots__ = ("workspace_id", "observer_id", "observed_id", "query", "top_k", "max_distance", "levels", "consistency", "as_of", "scope_id")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MAX_DISTANCE_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observer_id: str
    observed_id: str
    query: str
    top_k: int
    max_distance: float
    levels: _containers.RepeatedScalarFieldContainer[ObservationLevel]
    consistency: _common_pb2.ReadConsistency
    as_of: _timestamp_pb2.Timestamp
    scope_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., query: _Optional[str] = ..., top_k: _Optional[int] = ..., max_distance: _Optional[float] = ..., levels: _Optional[_Iterable[_Union[ObservationLevel, str]]] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., scope_id: _Optional[str] = ...) -> None: ...

class ObservationMatch(_message.Message):
    __slots__ = ("observation", "distance")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_FIELD_NUMBER: _ClassVar[int]
    observation: Observation
    distance: float
    def __init__(self, observation: _Optional[_Union[Observation, _Mapping]] = ..., distance: _Optional[float] = ...) -> None: ...

class SearchObservationsResponse(_message.Message):
    __slots__ = ("results", "embedding_model", "truncated")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ObservationMatch]
    embedding_model: str
    truncated: bool
    def __init__(self, results: _Optional[_Iterable[_Union[ObservationMatch, _Mapping]]] = ..., embedding_model: _Optional[str] = ..., truncated: _Optional[bool] = ...) -> None: ...

class NewObservation(_message.Message):
    __slots__ = ("content", "session_id", "sources", "observation_id")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    content: str
    session_id: str
    sources: _containers.RepeatedCompositeFieldContainer[ObservationSource]
    observation_id: str
    def __init__(self, content: _Optional[str] = ..., session_id: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[ObservationSource, _Mapping]]] = ..., observation_id: _Optional[str] = ...) -> None: ...

class CreateObservationsRequest(_message.Message):
    __slots__ = ("workspace_id", "observer_id", "observed_id", "observations", "idempotency_key", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observer_id: str
    observed_id: str
    observations: _containers.RepeatedCompositeFieldContainer[NewObservation]
    idempotency_key: str
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., observations: _Optional[_Iterable[_Union[NewObservation, _Mapping]]] = ..., idempotency_key: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class CreateObservationsResponse(_message.Message):
    __slots__ = ("observation_ids", "consistency_token")
    OBSERVATION_IDS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    observation_ids: _containers.RepeatedScalarFieldContainer[str]
    consistency_token: str
    def __init__(self, observation_ids: _Optional[_Iterable[str]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class DeleteObservationRequest(_message.Message):
    __slots__ = ("workspace_id", "observation_id", "reason", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observation_id: str
    reason: str
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., observation_id: _Optional[str] = ..., reason: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class DeleteObservationResponse(_message.Message):
    __slots__ = ("consistency_token",)
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    consistency_token: str
    def __init__(self, consistency_token: _Optional[str] = ...) -> None: ...

class GetProcessingStatusRequest(_message.Message):
    __slots__ = ("workspace_id", "observer_id", "observed_id", "session_id", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    observer_id: str
    observed_id: str
    session_id: str
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., session_id: _Optional[str] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class ProcessingCounts(_message.Message):
    __slots__ = ("pending", "in_flight", "done", "dead_lettered")
    PENDING_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    pending: int
    in_flight: int
    done: int
    dead_lettered: int
    def __init__(self, pending: _Optional[int] = ..., in_flight: _Optional[int] = ..., done: _Optional[int] = ..., dead_lettered: _Optional[int] = ...) -> None: ...

class DeadLetteredBatch(_message.Message):
    __slots__ = ("batch_id", "observer_id", "observed_id", "message_ids", "error", "failed_at", "message_count")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FAILED_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    observer_id: str
    observed_id: str
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    error: str
    failed_at: _timestamp_pb2.Timestamp
    message_count: int
    def __init__(self, batch_id: _Optional[str] = ..., observer_id: _Optional[str] = ..., observed_id: _Optional[str] = ..., message_ids: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ..., failed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., message_count: _Optional[int] = ...) -> None: ...

class DreamCounts(_message.Message):
    __slots__ = ("requested", "started", "completed", "failed")
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    requested: int
    started: int
    completed: int
    failed: int
    def __init__(self, requested: _Optional[int] = ..., started: _Optional[int] = ..., completed: _Optional[int] = ..., failed: _Optional[int] = ...) -> None: ...

class DeadLetteredSummary(_message.Message):
    __slots__ = ("session_id", "error", "attempts", "failed_at")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_AT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    error: str
    attempts: int
    failed_at: _timestamp_pb2.Timestamp
    def __init__(self, session_id: _Optional[str] = ..., error: _Optional[str] = ..., attempts: _Optional[int] = ..., failed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetProcessingStatusResponse(_message.Message):
    __slots__ = ("counts", "dead_lettered_batches", "dreams", "dead_lettered_summaries")
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_BATCHES_FIELD_NUMBER: _ClassVar[int]
    DREAMS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    counts: ProcessingCounts
    dead_lettered_batches: _containers.RepeatedCompositeFieldContainer[DeadLetteredBatch]
    dreams: DreamCounts
    dead_lettered_summaries: _containers.RepeatedCompositeFieldContainer[DeadLetteredSummary]
    def __init__(self, counts: _Optional[_Union[ProcessingCounts, _Mapping]] = ..., dead_lettered_batches: _Optional[_Iterable[_Union[DeadLetteredBatch, _Mapping]]] = ..., dreams: _Optional[_Union[DreamCounts, _Mapping]] = ..., dead_lettered_summaries: _Optional[_Iterable[_Union[DeadLetteredSummary, _Mapping]]] = ...) -> None: ...
