"""Read queries over the projections (asyncio). Every query is scoped by workspace."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import RowMapping, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.schema import memberships, messages, peers, projection_offsets, sessions, workspaces


async def workspace(conn: AsyncConnection, workspace_id: str) -> RowMapping | None:
    row = await conn.execute(select(workspaces).where(workspaces.c.workspace_id == workspace_id))
    return row.mappings().first()


async def list_workspaces(conn: AsyncConnection, after: str, limit: int) -> Sequence[RowMapping]:
    stmt = (
        select(workspaces)
        .where(workspaces.c.workspace_id > after)
        .order_by(workspaces.c.workspace_id)
        .limit(limit)
    )
    return (await conn.execute(stmt)).mappings().all()


async def peer(conn: AsyncConnection, workspace_id: str, peer_id: str) -> RowMapping | None:
    stmt = select(peers).where(peers.c.workspace_id == workspace_id, peers.c.peer_id == peer_id)
    return (await conn.execute(stmt)).mappings().first()


async def existing_peers(conn: AsyncConnection, workspace_id: str, peer_ids: Sequence[str]) -> set[str]:
    stmt = select(peers.c.peer_id).where(
        peers.c.workspace_id == workspace_id, peers.c.peer_id.in_(list(peer_ids))
    )
    return set((await conn.scalars(stmt)).all())


async def peer_observe_me(conn: AsyncConnection, workspace_id: str, peer_ids: set[str]) -> dict[str, bool]:
    stmt = select(peers.c.peer_id, peers.c.observe_me).where(
        peers.c.workspace_id == workspace_id, peers.c.peer_id.in_(sorted(peer_ids))
    )
    return {p: o for p, o in await conn.execute(stmt)}


async def list_peers(
    conn: AsyncConnection, workspace_id: str, after: str, limit: int
) -> Sequence[RowMapping]:
    stmt = (
        select(peers)
        .where(peers.c.workspace_id == workspace_id, peers.c.peer_id > after)
        .order_by(peers.c.peer_id)
        .limit(limit)
    )
    return (await conn.execute(stmt)).mappings().all()


async def session(conn: AsyncConnection, workspace_id: str, session_id: str) -> RowMapping | None:
    stmt = select(sessions).where(
        sessions.c.workspace_id == workspace_id, sessions.c.session_id == session_id
    )
    return (await conn.execute(stmt)).mappings().first()


async def list_sessions(
    conn: AsyncConnection, workspace_id: str, member: str, after: str, limit: int
) -> Sequence[RowMapping]:
    stmt = select(sessions).where(
        sessions.c.workspace_id == workspace_id, sessions.c.session_id > after
    )
    if member:
        stmt = stmt.where(
            sessions.c.session_id.in_(
                select(memberships.c.session_id).where(
                    memberships.c.workspace_id == workspace_id, memberships.c.peer_id == member
                )
            )
        )
    return (await conn.execute(stmt.order_by(sessions.c.session_id).limit(limit))).mappings().all()


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


async def message(conn: AsyncConnection, workspace_id: str, message_id: str) -> RowMapping | None:
    stmt = select(messages).where(
        messages.c.workspace_id == workspace_id, messages.c.message_id == message_id
    )
    return (await conn.execute(stmt)).mappings().first()


async def list_messages(
    conn: AsyncConnection, workspace_id: str, session_id: str, after_seq: int | None,
    limit: int, reverse: bool,
) -> Sequence[RowMapping]:
    c = messages.c
    stmt = select(messages).where(c.workspace_id == workspace_id, c.session_id == session_id)
    if after_seq is not None:
        stmt = stmt.where(c.seq < after_seq if reverse else c.seq > after_seq)
    order = c.seq.desc() if reverse else c.seq
    return (await conn.execute(stmt.order_by(order).limit(limit))).mappings().all()


async def projected_offsets(
    conn: AsyncConnection, partitions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """Next offset the projections will apply, per (topic, partition)."""
    t = projection_offsets.c
    stmt = select(t.topic, t.partition, t.next_offset).where(
        tuple_(t.topic, t.partition).in_(list(partitions))
    )
    return {(topic, p): n for topic, p, n in await conn.execute(stmt)}
