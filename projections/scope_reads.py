"""Read queries over scopes: a scope's row, and its sessions now or as they stood at a time."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, RowMapping, Select, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.schema import scope_changes, scope_members, scopes


async def scope(conn: AsyncConnection, workspace_id: str, scope_id: str) -> RowMapping | None:
    stmt = select(scopes).where(scopes.c.workspace_id == workspace_id, scopes.c.scope_id == scope_id)
    return (await conn.execute(stmt)).mappings().first()


async def list_scopes(conn: AsyncConnection, workspace_id: str, after: str, limit: int) -> Sequence[RowMapping]:
    """The workspace's scopes after `after`, in id order."""
    stmt = select(scopes).where(scopes.c.workspace_id == workspace_id, scopes.c.scope_id > after)
    return (await conn.execute(stmt.order_by(scopes.c.scope_id).limit(limit))).mappings().all()


def members_by_history(*where: ColumnElement[bool]) -> Select:
    """(workspace_id, scope_id, session_id) of each session whose latest change among the scope_changes rows
    matching `where` added it: what scope_members holds, computed from the whole history."""
    c = scope_changes.c
    key = (c.workspace_id, c.scope_id, c.session_id)
    latest = (
        select(*key, c.added, func.row_number().over(partition_by=key, order_by=c.seq.desc()).label("n"))
        .where(*where)
        .subquery()
    )
    return select(latest.c.workspace_id, latest.c.scope_id, latest.c.session_id).where(latest.c.n == 1, latest.c.added)


def _members_at(workspace_id: str, scope_ids: Sequence[str], as_of: datetime) -> Select:
    c = scope_changes.c
    history = members_by_history(c.workspace_id == workspace_id, c.scope_id.in_(scope_ids), c.recorded_at <= as_of)
    h = history.subquery()
    return select(h.c.scope_id, h.c.session_id)


def _members_now(workspace_id: str, scope_ids: Sequence[str]) -> Select:
    m = scope_members.c
    return select(m.scope_id, m.session_id).where(m.workspace_id == workspace_id, m.scope_id.in_(scope_ids))


async def session_id_sizes(
    conn: AsyncConnection, workspace_id: str, scope_ids: Sequence[str]
) -> dict[str, tuple[int, int]]:
    """Each scope's number of sessions now and the UTF-8 bytes of their ids together, (0, 0) for an empty
    one: what a reply of the scope holds, known without reading every id."""
    m = scope_members.c
    stmt = (
        select(m.scope_id, func.count(), func.coalesce(func.sum(func.octet_length(m.session_id)), 0))
        .where(m.workspace_id == workspace_id, m.scope_id.in_(list(scope_ids)))
        .group_by(m.scope_id)
    )
    sizes = {scope_id: (count, int(octets)) for scope_id, count, octets in await conn.execute(stmt)}
    return {s: sizes.get(s, (0, 0)) for s in scope_ids}


async def created_sessions(conn: AsyncConnection, scope_row: RowMapping) -> frozenset[str]:
    """The sessions a scope was created with: its ScopeCreated's rows in the history."""
    c = scope_changes.c
    stmt = select(c.session_id).where(c.event_id == scope_row["event_id"])
    return frozenset((await conn.execute(stmt)).scalars())


async def scope_sessions(
    conn: AsyncConnection, workspace_id: str, scope_ids: Sequence[str], as_of: datetime | None = None
) -> dict[str, tuple[str, ...]]:
    """Each scope's sessions, in id order: those in it now, or (with `as_of`) those whose latest change
    recorded by then added them."""
    ids = list(scope_ids)
    # the present from scope_members: the history may be many times longer than what a scope holds
    stmt = _members_now(workspace_id, ids) if as_of is None else _members_at(workspace_id, ids, as_of)
    out: dict[str, list[str]] = {s: [] for s in scope_ids}
    for scope_id, session_id in await conn.execute(stmt.order_by(*stmt.selected_columns)):
        out[scope_id].append(session_id)
    return {s: tuple(ids) for s, ids in out.items()}
