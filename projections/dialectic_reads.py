"""Read queries of the dialectic Chat's tools. Every message query is scoped to what the observer could see."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import RowMapping, exists, select
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.message_reads import MESSAGE_COLUMNS, as_of_bound, seen_while_member
from projections.observation_reads import ObservationFilter
from projections.schema import messages, observations, premises


def _visible(workspace_id: str, observer_id: str, sessions: Sequence[str] | None = None, as_of: datetime | None = None):
    """Messages the observer could see; with `sessions` (a scope's), only in those (none: nothing); with
    `as_of`, only those there then."""
    stmt = select(*MESSAGE_COLUMNS).where(
        messages.c.workspace_id == workspace_id, seen_while_member(messages, observer_id)
    )
    if as_of is not None:
        stmt = stmt.where(*as_of_bound(messages, as_of))
    return stmt if sessions is None else stmt.where(messages.c.session_id.in_(list(sessions)))


async def messages_between(
    conn: AsyncConnection,
    workspace_id: str,
    observer_id: str,
    after: datetime | None,
    before: datetime | None,
    limit: int,
    sessions: Sequence[str] | None = None,
    as_of: datetime | None = None,
) -> Sequence[RowMapping]:
    """Messages the observer could see, created in [after, before) (the message search's window), oldest
    first; with `as_of`, only those there then (`as_of_bound`)."""
    m = messages.c
    stmt = _visible(workspace_id, observer_id, sessions, as_of)
    if after is not None:
        stmt = stmt.where(m.created_at >= after)
    if before is not None:
        stmt = stmt.where(m.created_at < before)
    return (await conn.execute(stmt.order_by(m.created_at, m.message_id).limit(limit))).mappings().all()


def _like_literal(pattern: str) -> str:
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def grep_messages(
    conn: AsyncConnection,
    workspace_id: str,
    observer_id: str,
    pattern: str,
    limit: int,
    before: datetime | None = None,
    sessions: Sequence[str] | None = None,
    as_of: datetime | None = None,
) -> Sequence[RowMapping]:
    """Messages the observer could see that contain `pattern` (literal, any case), newest first; with
    `before`, only those created before it; with `as_of`, only those there then (`as_of_bound`)."""
    m = messages.c
    stmt = _visible(workspace_id, observer_id, sessions, as_of).where(
        m.content.ilike(_like_literal(pattern), escape="\\")
    )
    if before is not None:
        stmt = stmt.where(m.created_at < before)
    return (await conn.execute(stmt.order_by(m.created_at.desc(), m.message_id).limit(limit))).mappings().all()


async def pair_observations(conn: AsyncConnection, pair: ObservationFilter, ids: Sequence[str]) -> list[RowMapping]:
    """The pair's observations among `ids` (superseded and deleted ones too, as the filter says), oldest first."""
    o = observations.c
    stmt = select(*pair.columns()).where(*pair.where(), o.observation_id.in_(list(ids)))
    return list((await conn.execute(stmt.order_by(o.created_at, o.observation_id))).mappings().all())


async def concluded_from(conn: AsyncConnection, workspace_id: str, premise_id: str) -> list[str]:
    """Ids of the observations that cite `premise_id` as a premise."""
    p = premises.c
    stmt = select(p.observation_id).where(p.workspace_id == workspace_id, p.premise_id == premise_id)
    return list((await conn.scalars(stmt.order_by(p.observation_id))).all())


async def has_evidence(
    conn: AsyncConnection,
    workspace_id: str,
    observer_id: str,
    observed_id: str,
    as_of: datetime | None = None,
    sessions: Sequence[str] | None = None,
    reader_id: str = "",
) -> bool:
    """Whether anything could answer a question about the pair: a live observation in its store, or a
    message by the observed peer that the reader (the observer unless given) could see (as of `as_of`)."""
    m = messages.c
    store = exists().where(
        *ObservationFilter(
            workspace_id,
            observer_id,
            observed_id,
            as_of=as_of,
            allowed_sessions=None if sessions is None else tuple(sessions),
        ).where()
    )
    said = exists().where(
        m.workspace_id == workspace_id,
        m.peer_id == observed_id,
        seen_while_member(messages, reader_id or observer_id),
        m.session_id.in_(list(sessions)) if sessions is not None else True,
        *(as_of_bound(messages, as_of) if as_of is not None else ()),
    )
    return bool(await conn.scalar(select(store | said)))
