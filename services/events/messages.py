"""Conversation turns."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from services.events.base import Event
from services.events.configuration import Configuration
from services.events.requests import KeyedRequest, keyed_v1_to_v2
from services.events.vectors import PackedVector


class MessageOrigin(BaseModel):
    """Where a copied message was first sent: CloneSession's copies (and copies of copies) name it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workspace_id: str
    session_id: str
    message_id: str


class MessageAppended(Event):
    """One turn was posted to a session.

    `created_at` is when the turn happened (a client may set it for backfills); `occurred_at` in the
    envelope is when peerlog recorded it.
    """

    key_fields: ClassVar[tuple[str, ...]] = ("workspace_id", "session_id")
    schema_version_current: ClassVar[int] = 5  # 2: `request`; 3: the configurations; 4: `origin`; 5: `author_name`
    # version 2 had no configuration: none was set; version 3 had no origin: none was a copy; version 4
    # had no author name: the author was read by its id
    upcasters = {1: keyed_v1_to_v2, 2: lambda data: data, 3: lambda data: data, 4: lambda data: data}

    session_id: str
    message_id: str
    peer_id: str
    content: str
    created_at: AwareDatetime
    # the author's peer-level observe_me when the message was accepted; a session-level setting
    # (MemberJoined.observe_me) overrides it. Stamped here so the router decides from its own stream.
    author_observe_me: bool = True
    # the author's display name when the message was accepted (the `name` of its peer's metadata; empty:
    # none, the id is read as words), stamped so the embedder and the projections name the author as
    # people do in questions ("What did Maria say?") when its id says nothing ("u-4711")
    author_name: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)
    request: KeyedRequest | None = None  # set when the client sent an idempotency key
    configuration: Configuration | None = None  # the message level, as the client sent it
    # the workspace level when the message was accepted, stamped (like author_observe_me) so the session
    # processors resolve it in their own log order; the session level comes in order on the same topic
    workspace_configuration: Configuration | None = None
    origin: MessageOrigin | None = None  # set on a copy (CloneSession): the message it was first sent as


class EmbeddedMessage(BaseModel):
    """One message's embedding."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    message_id: str
    session_id: str
    vector: PackedVector


class MessagesEmbedded(Event):
    """Messages of one session were embedded; the vectors ride in the event, so replay needs no model."""

    key_fields: ClassVar[tuple[str, ...]] = ("workspace_id", "session_id")
    schema_version_current: ClassVar[int] = 2  # 2: the vectors as base64 (vectors.py reads both)
    upcasters = {1: lambda data: data}

    session_id: str
    messages: tuple[EmbeddedMessage, ...]
    embedding_model: str

    @model_validator(mode="after")
    def _one_session(self) -> MessagesEmbedded:
        strays = {m.session_id for m in self.messages} - {self.session_id}
        if strays:
            raise ValueError(f"messages of sessions {sorted(strays)} in an event keyed by {self.session_id!r}")
        return self
