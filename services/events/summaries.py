"""Rolling session summaries."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from services.events.base import Event

SESSION_KEY = ("workspace_id", "session_id")


class SummaryKind(StrEnum):
    SHORT = "short"
    LONG = "long"


class SummaryUpdated(Event):
    """A new summary of one kind, covering the session up to `last_seq`."""

    key_fields: ClassVar[tuple[str, ...]] = SESSION_KEY

    session_id: str
    kind: SummaryKind
    content: str
    last_message_id: str
    last_seq: int
    messages_covered: int
    token_count: int
    model: str
    prompt_version: str


class SummaryRetryRequested(Event):
    """An operator asks the summarizer to try the session's failed summaries again now
    (`peerlog derivations retry`); on the session's topic, so it comes in order with its messages."""

    key_fields: ClassVar[tuple[str, ...]] = SESSION_KEY

    session_id: str


class SummaryDeadLettered(Event):
    """The model kept failing on a summary; nothing is stored in its place."""

    key_fields: ClassVar[tuple[str, ...]] = SESSION_KEY

    session_id: str
    kind: SummaryKind
    last_seq: int
    error: str
    attempts: int
    # its messages fell out of the pending state: no later summary covers them, so none resolves it
    dropped: bool = False
