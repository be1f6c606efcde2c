import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from peerlog.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Webhook(_message.Message):
    __slots__ = ("webhook_id", "workspace_id", "url", "event_types", "created_at")
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    webhook_id: str
    workspace_id: str
    url: str
    event_types: _containers.RepeatedScalarFieldContainer[str]
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, webhook_id: _Optional[str] = ..., workspace_id: _Optional[str] = ..., url: _Optional[str] = ..., event_types: _Optional[_Iterable[str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateWebhookRequest(_message.Message):
    __slots__ = ("workspace_id", "url", "event_types")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    url: str
    event_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, workspace_id: _Optional[str] = ..., url: _Optional[str] = ..., event_types: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateWebhookResponse(_message.Message):
    __slots__ = ("webhook", "secret")
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    webhook: Webhook
    secret: str
    def __init__(self, webhook: _Optional[_Union[Webhook, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class ListWebhooksRequest(_message.Message):
    __slots__ = ("workspace_id",)
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ...) -> None: ...

class ListWebhooksResponse(_message.Message):
    __slots__ = ("webhooks",)
    WEBHOOKS_FIELD_NUMBER: _ClassVar[int]
    webhooks: _containers.RepeatedCompositeFieldContainer[Webhook]
    def __init__(self, webhooks: _Optional[_Iterable[_Union[Webhook, _Mapping]]] = ...) -> None: ...

class DeleteWebhookRequest(_message.Message):
    __slots__ = ("workspace_id", "webhook_id")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    webhook_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., webhook_id: _Optional[str] = ...) -> None: ...

class DeleteWebhookResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WebhookDeadLetter(_message.Message):
    __slots__ = ("event_id", "event_type", "json", "attempts", "error")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    event_type: str
    json: str
    attempts: int
    error: str
    def __init__(self, event_id: _Optional[str] = ..., event_type: _Optional[str] = ..., json: _Optional[str] = ..., attempts: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class ListWebhookDeadLettersRequest(_message.Message):
    __slots__ = ("workspace_id", "webhook_id", "page")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    webhook_id: str
    page: _common_pb2.PageRequest
    def __init__(self, workspace_id: _Optional[str] = ..., webhook_id: _Optional[str] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ...) -> None: ...

class ListWebhookDeadLettersResponse(_message.Message):
    __slots__ = ("dead_letters", "next_page_token")
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    dead_letters: _containers.RepeatedCompositeFieldContainer[WebhookDeadLetter]
    next_page_token: str
    def __init__(self, dead_letters: _Optional[_Iterable[_Union[WebhookDeadLetter, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RetryWebhookDeadLetterRequest(_message.Message):
    __slots__ = ("workspace_id", "webhook_id", "event_id")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    webhook_id: str
    event_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., webhook_id: _Optional[str] = ..., event_id: _Optional[str] = ...) -> None: ...

class RetryWebhookDeadLetterResponse(_message.Message):
    __slots__ = ("delivered", "error")
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    delivered: bool
    error: str
    def __init__(self, delivered: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...
