import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from peerlog.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ConfigurationLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONFIGURATION_LEVEL_UNSPECIFIED: _ClassVar[ConfigurationLevel]
    CONFIGURATION_LEVEL_GLOBAL: _ClassVar[ConfigurationLevel]
    CONFIGURATION_LEVEL_WORKSPACE: _ClassVar[ConfigurationLevel]
    CONFIGURATION_LEVEL_SESSION: _ClassVar[ConfigurationLevel]
    CONFIGURATION_LEVEL_MESSAGE: _ClassVar[ConfigurationLevel]
CONFIGURATION_LEVEL_UNSPECIFIED: ConfigurationLevel
CONFIGURATION_LEVEL_GLOBAL: ConfigurationLevel
CONFIGURATION_LEVEL_WORKSPACE: ConfigurationLevel
CONFIGURATION_LEVEL_SESSION: ConfigurationLevel
CONFIGURATION_LEVEL_MESSAGE: ConfigurationLevel

class Configuration(_message.Message):
    __slots__ = ("reasoning", "observe_me", "observe_others", "summaries", "summary_short_every", "summary_long_every", "dreams", "dream_threshold", "peer_card", "deriver_instructions", "dialectic_instructions")
    REASONING_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_ME_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_OTHERS_FIELD_NUMBER: _ClassVar[int]
    SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_SHORT_EVERY_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_LONG_EVERY_FIELD_NUMBER: _ClassVar[int]
    DREAMS_FIELD_NUMBER: _ClassVar[int]
    DREAM_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    PEER_CARD_FIELD_NUMBER: _ClassVar[int]
    DERIVER_INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    DIALECTIC_INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    reasoning: bool
    observe_me: bool
    observe_others: bool
    summaries: bool
    summary_short_every: int
    summary_long_every: int
    dreams: bool
    dream_threshold: int
    peer_card: bool
    deriver_instructions: str
    dialectic_instructions: str
    def __init__(self, reasoning: _Optional[bool] = ..., observe_me: _Optional[bool] = ..., observe_others: _Optional[bool] = ..., summaries: _Optional[bool] = ..., summary_short_every: _Optional[int] = ..., summary_long_every: _Optional[int] = ..., dreams: _Optional[bool] = ..., dream_threshold: _Optional[int] = ..., peer_card: _Optional[bool] = ..., deriver_instructions: _Optional[str] = ..., dialectic_instructions: _Optional[str] = ...) -> None: ...

class SetWorkspaceConfigurationRequest(_message.Message):
    __slots__ = ("workspace_id", "configuration")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIGURATION_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    configuration: Configuration
    def __init__(self, workspace_id: _Optional[str] = ..., configuration: _Optional[_Union[Configuration, _Mapping]] = ...) -> None: ...

class SetSessionConfigurationRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "configuration")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIGURATION_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    configuration: Configuration
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., configuration: _Optional[_Union[Configuration, _Mapping]] = ...) -> None: ...

class SetMessageConfigurationRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "message_id", "configuration", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIGURATION_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    message_id: str
    configuration: Configuration
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., message_id: _Optional[str] = ..., configuration: _Optional[_Union[Configuration, _Mapping]] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class SetConfigurationResponse(_message.Message):
    __slots__ = ("consistency_token",)
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    consistency_token: str
    def __init__(self, consistency_token: _Optional[str] = ...) -> None: ...

class GetEffectiveConfigurationRequest(_message.Message):
    __slots__ = ("workspace_id", "session_id", "message_id", "as_of", "consistency")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    session_id: str
    message_id: str
    as_of: _timestamp_pb2.Timestamp
    consistency: _common_pb2.ReadConsistency
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., message_id: _Optional[str] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., consistency: _Optional[_Union[_common_pb2.ReadConsistency, _Mapping]] = ...) -> None: ...

class EffectiveConfiguration(_message.Message):
    __slots__ = ("values", "levels")
    class LevelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ConfigurationLevel
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ConfigurationLevel, str]] = ...) -> None: ...
    VALUES_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    values: Configuration
    levels: _containers.ScalarMap[str, ConfigurationLevel]
    def __init__(self, values: _Optional[_Union[Configuration, _Mapping]] = ..., levels: _Optional[_Mapping[str, ConfigurationLevel]] = ...) -> None: ...
