"""The dream scheduler's pure core: when does a pair dream? `decide(state, event, settings) -> (state, events)`.

A dream is due when at least `threshold` explicit observations arrived since the last one, `cooldown_s`
passed since it ended, and the pair has been quiet for `idle_s`: no message from the observed peer and no
new explicit observation (`last_activity`). Time is the event's own `occurred_at` (clock ticks are events
too), so the decision depends on nothing but its inputs.
At most one dream is outstanding per pair: requested and not yet completed or failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from services.dreamer.settings import DreamSettings
from services.events import (
    PAIR_WIDE,
    DerivationPromoted,
    DreamCheckDue,
    DreamCompleted,
    DreamFailed,
    DreamForced,
    DreamReason,
    DreamRequested,
    Event,
    Level,
    MessagePerceived,
    ObservationAdded,
    ProducerInfo,
    new_id,
)


class PairSchedule(BaseModel):
    """What the scheduler remembers about one pair (kept in its changelog, so waits survive restarts)."""

    model_config = ConfigDict(frozen=True)

    new_explicit: int = 0  # explicit observations since the last dream was requested
    last_dream_at: datetime | None = None  # when the last dream ended
    last_message_at: datetime | None = None  # the observed peer's latest message, as perceived
    last_explicit_at: datetime | None = None  # the latest observation counted in new_explicit
    outstanding: str | None = None  # the dream id requested and not yet ended
    outstanding_explicit: int = 0  # what that dream took from new_explicit (given back if it fails)
    derivation: str = ""  # the pair's current derivation: only its new observations count
    # the configuration in force for the pair's latest perceived message (None: the global level, Defaults)
    dreams: bool | None = None
    threshold: int | None = None
    peer_card: bool | None = None


@dataclass(frozen=True)
class Defaults:
    """The global level's switches (PEERLOG_REASONING_DREAMS / _PEER_CARD), for a pair whose schedule holds
    none: one fed only by client observations, or whose messages no one perceives (reasoning off). Read as
    on, such a pair dreamt and edited its card with both switched off."""

    dreams: bool = True
    peer_card: bool = True


def last_activity(s: PairSchedule) -> datetime | None:
    """When the pair last changed: the later of its latest message and its latest counted observation."""
    # both: they come from different topics, so after a start, a restart or lag the observations can be read
    # before their message, which alone would then be unknown and the pair idle since forever. The later of
    # the two does not depend on that order; and new facts are activity: a dream amid a burst gets half of it
    known = [t for t in (s.last_message_at, s.last_explicit_at) if t is not None]
    return max(known, default=None)


def dreams_on(s: PairSchedule, defaults: Defaults) -> bool:
    """The pair's dreams switch: its latest perceived message's configuration, else the global level."""
    return s.dreams if s.dreams is not None else defaults.dreams


def ready(s: PairSchedule, now: datetime, cfg: DreamSettings, defaults: Defaults = Defaults()) -> bool:
    """Whether the pair should dream at `now` (the clock pre-checks with this before sending a tick)."""
    active = last_activity(s)
    return (
        s.outstanding is None
        and dreams_on(s, defaults)
        and s.new_explicit >= (s.threshold or cfg.threshold)
        and (s.last_dream_at is None or now - s.last_dream_at >= timedelta(seconds=cfg.cooldown_s))
        and (active is None or now - active >= timedelta(seconds=cfg.idle_s))
    )


def _request(s: PairSchedule, e: Event, reason: DreamReason, producer: ProducerInfo, defaults: Defaults):
    dream = DreamRequested(
        workspace_id=e.workspace_id,
        observer_id=e.observer_id,
        observed_id=e.observed_id,
        dream_id=new_id(),
        reason=reason,
        new_explicit=s.new_explicit,
        peer_card=s.peer_card if s.peer_card is not None else defaults.peer_card,
        causation_id=e.event_id,
        producer=producer,
    )
    state = s.model_copy(
        update={"outstanding": dream.dream_id, "outstanding_explicit": s.new_explicit, "new_explicit": 0}
    )
    return state, [dream]


def _ended(s: PairSchedule, e: DreamCompleted | DreamFailed) -> PairSchedule:
    if e.dream_id != s.outstanding:
        return s  # an old dream's late report
    # a failed dream starts the cooldown too: a model that is down must not be asked again every tick
    if isinstance(e, DreamFailed):  # its observations still wait to be consolidated
        return s.model_copy(
            update={
                "outstanding": None,
                "new_explicit": s.new_explicit + s.outstanding_explicit,
                "outstanding_explicit": 0,
                "last_dream_at": e.occurred_at,
            }
        )
    return s.model_copy(update={"outstanding": None, "outstanding_explicit": 0, "last_dream_at": e.occurred_at})


def decide(
    s: PairSchedule, e: Event, cfg: DreamSettings, producer: ProducerInfo, defaults: Defaults = Defaults()
) -> tuple[PairSchedule, list[Event]]:
    """The pair's new state and the dream requests `e` causes (none or one)."""
    if (
        isinstance(e, ObservationAdded)
        and e.level == Level.EXPLICIT
        and e.dream_id is None
        and e.derivation in (s.derivation, PAIR_WIDE)  # a client's write is in every derivation
    ):
        latest = max(e.occurred_at, s.last_explicit_at or e.occurred_at)
        s = s.model_copy(update={"new_explicit": s.new_explicit + 1, "last_explicit_at": latest})
    elif isinstance(e, DerivationPromoted):
        return s.model_copy(update={"derivation": e.derivation}), []
    elif isinstance(e, MessagePerceived):
        # the observed peer spoke: a waiting dream waits again (a running one is not interrupted)
        return s.model_copy(
            update={
                "last_message_at": e.occurred_at,
                "dreams": e.dreams,
                "threshold": e.dream_threshold,
                "peer_card": e.peer_card,
            }
        ), []
    elif isinstance(e, DreamForced):
        # forced past threshold, cooldown and idle wait, never past the switch: dreams off is an operator's
        # decision on cost and on what may be inferred, and any peer's token may force one
        forced = s.outstanding is None and dreams_on(s, defaults)
        return _request(s, e, DreamReason.FORCED, producer, defaults) if forced else (s, [])
    elif isinstance(e, DreamCompleted | DreamFailed):
        s = _ended(s, e)
    elif not isinstance(e, DreamCheckDue):
        return s, []
    due = ready(s, e.occurred_at, cfg, defaults)
    return _request(s, e, DreamReason.THRESHOLD, producer, defaults) if due else (s, [])
