"""What a pair's observer perceived: the router's output, the deriver's input."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from services.events.base import Event

PAIR_KEY = ("workspace_id", "observer_id", "observed_id")


def pair_of(key: str) -> dict[str, str]:
    """The pair fields of a pair key (the inverse of a pair event's `key`)."""
    return dict(zip(PAIR_KEY, key.split("/", 2), strict=True))


class Turn(BaseModel):
    """A message as context for another: who said what, truncated."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    message_id: str
    seq: int
    peer_id: str
    content: str
    created_at: datetime


class MessagePerceived(Event):
    """`observer` saw `observed` say something (the router decided the pair may see it).

    Carries the message itself and the turn before it by another speaker, so the deriver needs no
    lookups and replay needs nothing but the log.
    """

    key_fields: ClassVar[tuple[str, ...]] = PAIR_KEY

    observer_id: str
    observed_id: str
    session_id: str
    message_id: str
    seq: int
    content: str
    created_at: datetime
    previous_turn: Turn | None = None


class DerivationDue(Event):
    """A clock tick for one pair: derive its pending messages if the oldest has waited long enough."""

    key_fields: ClassVar[tuple[str, ...]] = PAIR_KEY

    observer_id: str
    observed_id: str
