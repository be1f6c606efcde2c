"""Reads of sessions, their memberships and their summaries (asyncio). Every query is scoped by workspace."""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from datetime import datetime

from sqlalchemy import RowMapping, bindparam, func, literal, select
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.schema import memberships, messages, sessions, summaries


async def session(conn: AsyncConnection, workspace_id: str, session_id: str) -> RowMapping | None:
    stmt = select(sessions).where(sessions.c.workspace_id == workspace_id, sessions.c.session_id == session_id)
    return (await conn.execute(stmt)).mappings().first()


async def list_sessions(
    conn: AsyncConnection, workspace_id: str, member: str, after: str, limit: int
) -> Sequence[RowMapping]:
    stmt = select(sessions).where(sessions.c.workspace_id == workspace_id, sessions.c.session_id > after)
    if member:
        stmt = stmt.where(
            sessions.c.session_id.in_(
                select(memberships.c.session_id).where(
                    memberships.c.workspace_id == workspace_id, memberships.c.peer_id == member
                )
            )
        )
    return (await conn.execute(stmt.order_by(sessions.c.session_id).limit(limit))).mappings().all()


async def seen_by(
    conn: AsyncConnection, workspace_id: str, peer_ids: Collection[str], session_ids: Collection[str]
) -> set[str]:
    """Which of `session_ids` one of `peer_ids` has been a member of, at any time."""
    if not peer_ids or not session_ids:
        return set()
    stmt = select(memberships.c.session_id).where(
        memberships.c.workspace_id == workspace_id,
        memberships.c.session_id.in_(sorted(session_ids)),
        memberships.c.peer_id.in_(sorted(peer_ids)),
    )
    return set((await conn.scalars(stmt)).all())


async def memberships_of(
    conn: AsyncConnection, workspace_id: str, session_ids: Sequence[str]
) -> dict[str, list[RowMapping]]:
    """Every membership period of the given sessions, in join order, by session id."""
    stmt = (
        select(memberships)
        .where(memberships.c.workspace_id == workspace_id, memberships.c.session_id.in_(list(session_ids)))
        .order_by(memberships.c.joined_at, memberships.c.joined_event_id)
    )
    out: dict[str, list[RowMapping]] = {s: [] for s in session_ids}
    for row in (await conn.execute(stmt)).mappings():
        out[row["session_id"]].append(row)
    return out


async def current_members(conn: AsyncConnection, workspace_id: str, session_id: str) -> set[str]:
    stmt = select(memberships.c.peer_id).where(
        memberships.c.workspace_id == workspace_id,
        memberships.c.session_id == session_id,
        memberships.c.left_event_id.is_(None),
    )
    return set((await conn.scalars(stmt)).all())


@functools.cache
def _summaries_statement(as_of: bool = False, reader: bool = False):
    t = summaries.c
    stmt = (
        select(summaries)
        .where(t.workspace_id == bindparam("workspace_id"), t.session_id == bindparam("session_id"))
        .where(t.created_at <= bindparam("as_of") if as_of else True)
        .order_by(t.kind, t.last_seq.desc(), t.created_at.desc(), t.event_id.desc())
        .distinct(t.kind)
    )
    return stmt.where(_reader_saw_all(t)) if reader else stmt


def _reader_saw_all(t):
    """That the reader saw every turn a summary covers (rows `t` of summaries): one membership period of
    its in the session runs from before the session's first message to the summary's last or later, in
    log order (message_reads.seen_while_member's rule). A summary covers its session from the start, as
    each rolls on the one before."""
    ms, m = memberships.c, messages.c
    first = select(func.min(m.seq)).where(m.workspace_id == t.workspace_id, m.session_id == t.session_id)
    return (
        select(literal(1))
        .where(
            ms.workspace_id == t.workspace_id,
            ms.session_id == t.session_id,
            ms.peer_id == bindparam("reader_id"),
            ms.joined_after_seq < first.scalar_subquery(),
            ms.left_after_seq.is_(None) | (ms.left_after_seq >= t.last_seq),
        )
        .exists()
    )


async def latest_summaries(
    conn: AsyncConnection, workspace_id: str, session_id: str, as_of: datetime | None = None, reader_id: str = ""
) -> dict[str, RowMapping]:
    """The latest summary of each kind a session has (had at `as_of`, if given), by kind ("short", "long");
    with a `reader_id`, the latest of those covering only turns that peer saw: a summary is not a way
    around the perspective its messages are read under."""
    values = {"workspace_id": workspace_id, "session_id": session_id, "as_of": as_of, "reader_id": reader_id}
    rows = await conn.execute(_summaries_statement(as_of is not None, bool(reader_id)), values)
    return {r["kind"]: r for r in rows.mappings()}
