"""When a processor's output is dated: when it goes to the log, not when each event of it was decided."""

from __future__ import annotations

from collections.abc import Iterable

from services.events.base import Event, utcnow


def written_now(events: Iterable[Event]) -> list[Event]:
    """`events` all dated now, as they go to the log together, not when each was made (a dream's edits, a
    deriver batch's windows: one model call each, seconds apart): an event's time is when reads as of a time
    first see it, and a page cursor past an earlier time would never list it."""
    now = utcnow()
    return [e.model_copy(update={"occurred_at": now}) for e in events]
