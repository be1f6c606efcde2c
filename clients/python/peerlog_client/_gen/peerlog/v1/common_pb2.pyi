from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class PageRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ReadConsistency(_message.Message):
    __slots__ = ("consistency_token",)
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    consistency_token: str
    def __init__(self, consistency_token: _Optional[str] = ...) -> None: ...
