"""Reads of sessions, their memberships and their summaries (asyncio). Every query is scoped by workspace."""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from datetime import datetime

from sqlalchemy import Integer, RowMapping, Text, bindparam, column, func, literal, select, true, values
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
    conn: AsyncConnection, workspace_id: str, session_ids: Sequence[str], peer_ids: Collection[str] | None = None
) -> dict[str, list[RowMapping]]:
    """Every membership period of the given sessions (only `peer_ids`' if given), in join order, by session id."""
    m = memberships.c
    stmt = (
        select(memberships)
        .where(m.workspace_id == workspace_id, m.session_id.in_(list(session_ids)))
        .where(m.peer_id.in_(sorted(peer_ids)) if peer_ids is not None else true())
        .order_by(m.joined_at, m.joined_event_id)
    )
    return _by_session((await conn.execute(stmt)).mappings(), session_ids)


def _by_session(rows, session_ids: Sequence[str]) -> dict[str, list[RowMapping]]:
    out: dict[str, list[RowMapping]] = {s: [] for s in session_ids}
    for row in rows:
        out[row["session_id"]].append(row)
    return out


async def shown_memberships_of(
    conn: AsyncConnection, workspace_id: str, session_ids: Sequence[str], most: int
) -> dict[str, list[RowMapping]]:
    """Of each given session, in join order, its first `most` current membership periods and then its newest
    past ones, `most` in all, read without the older past ones: a session whose members come and go may
    have had hundreds of thousands of periods."""
    current = _by_session((await conn.execute(_first_current(workspace_id, session_ids, most))).mappings(), session_ids)
    room = [(s, most - len(rows)) for s, rows in current.items() if len(rows) < most]
    past = (await conn.execute(_newest_past(workspace_id, room))).mappings() if room else ()
    out = _by_session(past, session_ids)
    order = lambda r: (r["joined_at"], r["joined_event_id"])
    return {s: sorted(current[s] + out[s], key=order) for s in session_ids}


def _first_current(workspace_id: str, session_ids: Sequence[str], most: int):
    m = memberships.c
    n = func.row_number().over(partition_by=m.session_id, order_by=(m.joined_at, m.joined_event_id)).label("n")
    ranked = (
        select(memberships, n)
        .where(m.workspace_id == workspace_id, m.session_id.in_(list(session_ids)), m.left_at.is_(None))
        .subquery()
    )
    return select(*(ranked.c[c.name] for c in memberships.c)).where(ranked.c.n <= most)


def _newest_past(workspace_id: str, room: Sequence[tuple[str, int]]):
    """The newest (by join) past periods of each session, as many as its `room` says: a LIMIT per session."""
    m = memberships.c
    wanted = values(column("session_id", Text), column("room", Integer), name="wanted").data(list(room))
    newest = (
        select(memberships)
        .where(m.workspace_id == workspace_id, m.session_id == wanted.c.session_id, m.left_at.is_not(None))
        .order_by(m.joined_at.desc(), m.joined_event_id.desc())
        .limit(wanted.c.room)
        .lateral()
    )
    return select(newest).select_from(wanted).join(newest, true())


async def membership_counts(conn: AsyncConnection, workspace_id: str, session_ids: Sequence[str]) -> dict[str, int]:
    """How many membership periods, current and past, each given session has had."""
    m = memberships.c
    stmt = (
        select(m.session_id, func.count())
        .where(m.workspace_id == workspace_id, m.session_id.in_(list(session_ids)))
        .group_by(m.session_id)
    )
    counts = dict((await conn.execute(stmt)).tuples().all())
    return {s: counts.get(s, 0) for s in session_ids}


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
