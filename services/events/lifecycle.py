"""Workspace, peer, session and membership lifecycle events."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import AwareDatetime, Field

from services.events.base import Event


class WorkspaceCreated(Event):
    """A tenant came into existence."""

    metadata: dict[str, Any] = Field(default_factory=dict)


class PeerCreated(Event):
    """A participant (human or agent) was registered in a workspace."""

    peer_id: str
    observe_me: bool = True
    metadata: dict[str, Any] = Field(default_factory=dict)


class PeerConfigured(Event):
    """A peer's workspace-level settings changed."""

    peer_id: str
    observe_me: bool


class PeerMetadataSet(Event):
    """A peer's metadata now reads `metadata` (the whole of it, not a diff). Its `name` is the display name
    the messages the peer sends from then on carry; those sent before keep the name they were sent under."""

    peer_id: str
    metadata: dict[str, Any]


class SessionCreated(Event):
    """A conversation was opened."""

    key_fields: ClassVar[tuple[str, ...]] = ("workspace_id", "session_id")

    session_id: str
    metadata: dict[str, Any] = Field(default_factory=dict)


def _others_not_said(data: dict[str, Any]) -> dict[str, Any]:
    # version 1 could not tell "no" from "not said": false deferred to the configuration, as None does now
    return {**data, "observe_others": data.get("observe_others") or None}


class MemberJoined(Event):
    """A peer joined a session, with its session-level observation settings.

    `observe_me` None means "use the peer's own setting"; `observe_others` None means "the configuration's"
    (message, session, workspace, global); either set here overrides those.
    """

    key_fields: ClassVar[tuple[str, ...]] = ("workspace_id", "session_id")
    schema_version_current: ClassVar[int] = 2  # 2: observe_others may be None (not said) and false means no
    upcasters = {1: _others_not_said}

    session_id: str
    peer_id: str
    observe_me: bool | None = None
    observe_others: bool | None = None
    joined_at: AwareDatetime


class MemberLeft(Event):
    """A peer left a session; it perceives nothing sent after `left_at`."""

    key_fields: ClassVar[tuple[str, ...]] = ("workspace_id", "session_id")

    session_id: str
    peer_id: str
    left_at: AwareDatetime
