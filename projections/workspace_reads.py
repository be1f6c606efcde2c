"""Reads of workspaces, and of which peers and sessions a workspace has (asyncio).

Every query is scoped by workspace.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import RowMapping, Text, bindparam, func, literal, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.schema import peers, sessions, workspaces


async def workspace(conn: AsyncConnection, workspace_id: str) -> RowMapping | None:
    row = await conn.execute(select(workspaces).where(workspaces.c.workspace_id == workspace_id))
    return row.mappings().first()


async def list_workspaces(
    conn: AsyncConnection, after: str, limit: int, only: Collection[str] | None = None
) -> Sequence[RowMapping]:
    """Workspaces after `after` in id order; only those in `only` unless it is None."""
    stmt = select(workspaces).where(workspaces.c.workspace_id > after).order_by(workspaces.c.workspace_id).limit(limit)
    if only is not None:
        stmt = stmt.where(workspaces.c.workspace_id.in_(sorted(only)))
    return (await conn.execute(stmt)).mappings().all()


@dataclass(frozen=True)
class ExistingIds:
    """Whether a workspace exists, and which of some peer and session ids it has."""

    workspace: bool
    peers: frozenset[str]
    sessions: frozenset[str]


@functools.cache
def _known_statement():
    """Built once: the scope check runs on every read, and building it cost more than running it."""
    workspace_id = bindparam("workspace_id")

    def ids(column, table, name):
        return (
            select(func.coalesce(func.array_agg(column), literal([], ARRAY(Text))))
            .where(table.c.workspace_id == workspace_id, column.in_(bindparam(name, expanding=True)))
            .scalar_subquery()
        )

    return select(
        select(workspaces.c.workspace_id).where(workspaces.c.workspace_id == workspace_id).exists(),
        ids(peers.c.peer_id, peers, "peer_ids"),
        ids(sessions.c.session_id, sessions, "session_ids"),
    )


async def known(
    conn: AsyncConnection, workspace_id: str, peer_ids: Sequence[str], session_ids: Sequence[str]
) -> ExistingIds:
    """Whether the workspace exists, and which of the given peers and sessions it has (one round trip)."""
    row = (
        await conn.execute(
            _known_statement(),
            {"workspace_id": workspace_id, "peer_ids": list(peer_ids), "session_ids": list(session_ids)},
        )
    ).one()
    return ExistingIds(row[0], frozenset(row[1]), frozenset(row[2]))
