"""Dreams: a pair's offline consolidation, from the request to its outcome. All keyed by the pair."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from services.events.base import Event
from services.events.perception import PAIR_KEY


class DreamReason(StrEnum):
    THRESHOLD = "threshold"  # enough new explicit observations, cooldown over, pair idle
    FORCED = "forced"  # ScheduleDream


class _DreamEvent(Event):
    abstract: ClassVar[bool] = True
    key_fields: ClassVar[tuple[str, ...]] = PAIR_KEY

    observer_id: str
    observed_id: str


class DreamForced(_DreamEvent):
    """A client asked for a dream now (ScheduleDream); the scheduler still de-duplicates it."""

    reason: str = ""


class DreamCheckDue(_DreamEvent):
    """A clock tick for one pair waiting to dream: re-check the trigger now, in-stream."""


class DreamRequested(_DreamEvent):
    """The scheduler decided the pair dreams; at most one is outstanding per pair."""

    schema_version_current: ClassVar[int] = 2  # 2: `peer_card`
    upcasters = {1: lambda data: data}  # version 1 had no such setting: the card was always kept

    dream_id: str
    reason: DreamReason
    new_explicit: int  # explicit observations since the previous dream
    peer_card: bool = True  # whether the dream may edit the peer card (the configuration levels)


class DreamStarted(_DreamEvent):
    """The dreamer took the request up."""

    dream_id: str


class DreamCompleted(_DreamEvent):
    """The dream ended; its edits are the events carrying its dream id."""

    dream_id: str
    edits: int = 0


class DreamFailed(_DreamEvent):
    """The dream ended without finishing; `reason` says why. Its edits so far stand, `edits` of them."""

    schema_version_current: ClassVar[int] = 2  # 2: `edits`
    upcasters = {1: lambda data: data}  # version 1 did not count them: None, as the projection held them

    dream_id: str
    reason: str
    edits: int | None = None
