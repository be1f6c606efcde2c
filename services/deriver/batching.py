"""Pure batching: a pair's pending messages, when they are due, and how they split into model calls."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict
from pydantic_core import to_json

from services.deriver.settings import DeriverSettings
from services.events import Event, MessagePerceived, Turn

# a pair's pending messages are one changelog record, which Kafka refuses past 1 MB (and the worker then
# redoes the batch for ever): derive once they hold this much, whatever their tokens. A short reply after a
# long turn holds that turn again as its context, so bytes grow faster than the token target
PENDING_BYTES = 256_000


class PendingMessage(BaseModel):
    model_config = ConfigDict(frozen=True)

    message_id: str
    session_id: str
    seq: int
    content: str
    created_at: datetime
    tokens: int
    previous_turn: Turn | None = None
    observed_name: str = ""  # the author's display name when it sent the message
    perceived_at: datetime
    instructions: str = ""  # custom deriver instructions in force for the message
    stored: int = 0  # its bytes in the changelog record (JSON: a control character is 6 of them, not 1)


class Batching(BaseModel):
    model_config = ConfigDict(frozen=True)

    pending: tuple[PendingMessage, ...] = ()
    # the derivation (stored label) the pair's messages go into; DerivationPromoted moves it
    derivation: str = ""

    @property
    def tokens(self) -> int:
        return sum(p.tokens for p in self.pending)

    @property
    def stored(self) -> int:
        return sum(p.stored for p in self.pending)

    def oldest(self) -> datetime | None:
        return min((p.perceived_at for p in self.pending), default=None)


def add(state: Batching, event: MessagePerceived, tokens: int) -> Batching:
    """`state` with the perceived message queued (a message already queued is ignored)."""
    if any(p.message_id == event.message_id for p in state.pending):
        return state
    item = PendingMessage(
        message_id=event.message_id,
        session_id=event.session_id,
        seq=event.seq,
        content=event.content,
        created_at=event.created_at,
        tokens=tokens,
        previous_turn=event.previous_turn,
        observed_name=event.observed_name,
        perceived_at=event.occurred_at,
        instructions=event.instructions,
    )
    item = item.model_copy(update={"stored": len(to_json(item)) + 16})  # + the stored field itself
    return state.model_copy(update={"pending": (*state.pending, item)})


def due(state: Batching, settings: DeriverSettings, now: datetime) -> bool:
    """Whether the pair's pending messages should be derived now."""
    if not state.pending:
        return False
    if settings.flush or state.tokens >= settings.batch_tokens or state.stored >= PENDING_BYTES:
        return True
    return (now - state.oldest()).total_seconds() >= settings.max_wait_s


def ask(state: Batching, settings: DeriverSettings, now: datetime, asked: tuple[str, datetime] | None) -> bool:
    """Whether the clock should tick for the pair at `now`; `asked` is (oldest pending message, when) of
    its last tick. Once asked, the pair waits for that tick to be read (behind a backlog a tick per pair
    per tick_s would crowd the log) unless the age limit has passed again, in case it was lost."""
    if not due(state, settings, now):
        return False
    return (
        asked is None
        or asked[0] != state.pending[0].message_id
        or (now - asked[1]).total_seconds() >= settings.max_wait_s
    )


def next_window(state: Batching, window_tokens: int) -> tuple[tuple[PendingMessage, ...], Batching]:
    """The oldest messages that fit one call (always at least one) under one set of custom instructions,
    and what stays pending."""
    taken: list[PendingMessage] = []
    used = 0
    for item in state.pending:
        if taken and (used + item.tokens > window_tokens or item.instructions != taken[0].instructions):
            break
        taken.append(item)
        used += item.tokens
    return tuple(taken), state.model_copy(update={"pending": state.pending[len(taken) :]})


def take(
    state: Batching, event: Event, settings: DeriverSettings, everything: bool = False
) -> tuple[list[tuple[PendingMessage, ...]], Batching]:
    """The windows to derive on `event` (every pending one with `everything`), oldest first, and what
    stays pending.

    Age is measured at the event's own time (a message's perception, a clock tick's firing), not on the
    wall clock: read late from a backlog, every message looked old at once and was derived alone, one model
    call each. On event time a backlog batches as it would have live, and a quiet pair waits for the tick.
    """
    windows: list[tuple[PendingMessage, ...]] = []
    while state.pending and (everything or due(state, settings, event.occurred_at)):
        window, state = next_window(state, settings.window_tokens)
        windows.append(window)
    return windows, state
