"""Read queries over scopes: a scope's row, and its sessions now or as they stood at a time."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import RowMapping, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.schema import scope_changes, scopes


async def scope(conn: AsyncConnection, workspace_id: str, scope_id: str) -> RowMapping | None:
    stmt = select(scopes).where(scopes.c.workspace_id == workspace_id, scopes.c.scope_id == scope_id)
    return (await conn.execute(stmt)).mappings().first()


async def list_scopes(conn: AsyncConnection, workspace_id: str, after: str, limit: int) -> Sequence[RowMapping]:
    """The workspace's scopes after `after`, in id order."""
    stmt = select(scopes).where(scopes.c.workspace_id == workspace_id, scopes.c.scope_id > after)
    return (await conn.execute(stmt.order_by(scopes.c.scope_id).limit(limit))).mappings().all()


async def scope_sessions(
    conn: AsyncConnection, workspace_id: str, scope_ids: Sequence[str], as_of: datetime | None = None
) -> dict[str, tuple[str, ...]]:
    """Each scope's sessions, in id order: those whose latest change (recorded by `as_of`, if given) added them."""
    c = scope_changes.c
    where = [c.workspace_id == workspace_id, c.scope_id.in_(list(scope_ids))]
    if as_of is not None:
        where.append(c.recorded_at <= as_of)
    latest = (
        select(
            c.scope_id,
            c.session_id,
            c.added,
            func.row_number().over(partition_by=(c.scope_id, c.session_id), order_by=c.seq.desc()).label("n"),
        )
        .where(*where)
        .subquery()
    )
    stmt = (
        select(latest.c.scope_id, latest.c.session_id)
        .where(latest.c.n == 1, latest.c.added)
        .order_by(latest.c.scope_id, latest.c.session_id)
    )
    out: dict[str, list[str]] = {s: [] for s in scope_ids}
    for scope_id, session_id in await conn.execute(stmt):
        out[scope_id].append(session_id)
    return {s: tuple(ids) for s, ids in out.items()}
