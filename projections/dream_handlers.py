"""Projection handlers of dream events: one `dreams` row per request, advanced by start and end."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, update

from projections.inserts import insert_new
from projections.schema import dreams
from services.events import (
    DreamCheckDue,
    DreamCompleted,
    DreamFailed,
    DreamForced,
    DreamRequested,
    DreamStarted,
)


def dream_requested(conn: Connection, events: Sequence[DreamRequested]) -> None:
    rows = [
        dict(
            workspace_id=e.workspace_id,
            dream_id=e.dream_id,
            observer_id=e.observer_id,
            observed_id=e.observed_id,
            reason=e.reason.value,
            new_explicit=e.new_explicit,
            state="requested",
            requested_at=e.occurred_at,
        )
        for e in events
    ]
    insert_new(conn, dreams, rows)


def _advance(conn: Connection, e, **values) -> None:
    # a dream only moves forward: a repeated or late start never undoes its end
    order = {"requested": 0, "started": 1, "completed": 2, "failed": 2}
    earlier = [s for s, rank in order.items() if rank < order[values["state"]]]
    conn.execute(
        update(dreams)
        .where(dreams.c.workspace_id == e.workspace_id, dreams.c.dream_id == e.dream_id, dreams.c.state.in_(earlier))
        .values(**values)
    )


def dream_started(conn: Connection, events: Sequence[DreamStarted]) -> None:
    for e in events:
        _advance(conn, e, state="started", started_at=e.occurred_at)


def dream_completed(conn: Connection, events: Sequence[DreamCompleted]) -> None:
    for e in events:
        _advance(conn, e, state="completed", edits=e.edits, finished_at=e.occurred_at)


def dream_failed(conn: Connection, events: Sequence[DreamFailed]) -> None:
    for e in events:
        _advance(conn, e, state="failed", error=e.reason, edits=e.edits, finished_at=e.occurred_at)


def no_projection(conn: Connection, events) -> None:
    """Requests to the scheduler (a forced dream, a clock tick) change no table; their outcome does."""


DREAM_HANDLERS = {
    DreamForced: no_projection,
    DreamCheckDue: no_projection,
    DreamRequested: dream_requested,
    DreamStarted: dream_started,
    DreamCompleted: dream_completed,
    DreamFailed: dream_failed,
}
