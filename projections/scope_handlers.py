"""Projection of scope events: the scope rows, the history of their sessions (schema.scope_changes) and
their sessions now (schema.scope_members)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, delete, func, select

from projections.inserts import insert_new
from projections.schema import scope_changes, scope_members, scopes
from services.events import ScopeCreated, ScopeSessionsAdded, ScopeSessionsRemoved


def scope_created(conn: Connection, events: Sequence[ScopeCreated]) -> None:
    for e in events:
        # the first create of an id wins; a second (two API processes racing) changes nothing
        won = insert_new(
            conn,
            scopes,
            [
                dict(
                    workspace_id=e.workspace_id,
                    scope_id=e.scope_id,
                    name=e.name,
                    created_at=e.occurred_at,
                    event_id=e.event_id,
                )
            ],
            returning=True,
        )
        if won:
            _record(conn, e, e.session_ids, added=True)


def scope_sessions_added(conn: Connection, events: Sequence[ScopeSessionsAdded]) -> None:
    for e in events:
        _record(conn, e, e.session_ids, added=True)


def scope_sessions_removed(conn: Connection, events: Sequence[ScopeSessionsRemoved]) -> None:
    for e in events:
        _record(conn, e, e.session_ids, added=False)


def _record(conn: Connection, e, session_ids: Sequence[str], added: bool) -> None:
    """One row per session, all with the event's place among the scope's changes, and the members moved to
    match; a repeat is skipped, both for its history and its members."""
    c = scope_changes.c
    if not session_ids or conn.scalar(select(c.event_id).where(c.event_id == e.event_id).limit(1)) is not None:
        return
    _move_members(conn, e.workspace_id, e.scope_id, session_ids, added)
    last = conn.scalar(select(func.max(c.seq)).where(c.workspace_id == e.workspace_id, c.scope_id == e.scope_id))
    seq = (last or 0) + 1
    insert_new(
        conn,
        scope_changes,
        [
            dict(
                event_id=e.event_id,
                workspace_id=e.workspace_id,
                scope_id=e.scope_id,
                session_id=s,
                added=added,
                seq=seq,
                recorded_at=e.occurred_at,
            )
            for s in dict.fromkeys(session_ids)
        ],
    )


def _move_members(conn: Connection, workspace_id: str, scope_id: str, session_ids: Sequence[str], added: bool) -> None:
    if added:  # one already in (another API process added it too) stays as it is
        rows = [dict(workspace_id=workspace_id, scope_id=scope_id, session_id=s) for s in dict.fromkeys(session_ids)]
        insert_new(conn, scope_members, rows)
        return
    m = scope_members.c
    gone = (m.workspace_id == workspace_id, m.scope_id == scope_id, m.session_id.in_(list(session_ids)))
    conn.execute(delete(scope_members).where(*gone))


SCOPE_HANDLERS = {
    ScopeCreated: scope_created,
    ScopeSessionsAdded: scope_sessions_added,
    ScopeSessionsRemoved: scope_sessions_removed,
}
