"""Guards: the checks a write (and a read's pre-flight) runs before it touches the log: ids and request
fields valid (InvalidArgument), the workspace, sessions and peers named exist (NotFound)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from projections import peer_reads, session_reads, workspace_reads
from services.api import auth
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.tokens import NarrowView
from services.errors import NotFound

if TYPE_CHECKING:
    from services.api.writes import NewMessage


async def require_workspace(ctx: ApiDeps, workspace_id: str) -> RowMapping:
    async with ctx.engine.connect() as conn:
        row = await workspace_reads.workspace(conn, v.check_id("workspace_id", workspace_id))
    if row is None:
        raise NotFound(f"workspace {workspace_id!r} does not exist; create it with GetOrCreateWorkspace")
    return row


@asynccontextmanager
async def _connection(ctx: ApiDeps, conn: AsyncConnection | None):
    """`conn` if the caller has one open, else a new connection for this block."""
    if conn is not None:
        yield conn
    else:
        async with ctx.engine.connect() as fresh:
            yield fresh


async def require_session(
    ctx: ApiDeps, workspace_id: str, session_id: str, conn: AsyncConnection | None = None
) -> RowMapping:
    v.check_id("workspace_id", workspace_id)
    v.check_id("session_id", session_id)
    async with _connection(ctx, conn) as c:
        if auth.narrow_view(workspace_id) is not None:  # one its peers never joined reads as missing, said alike
            await check_scope(c, workspace_id, [session_id])
        row = await session_reads.session(c, workspace_id, session_id)
    if row is None:
        await require_workspace(ctx, workspace_id)  # say which of the two is missing
        raise NotFound(
            f"session {session_id!r} does not exist in workspace {workspace_id!r}; create it with GetOrCreateSession"
        )
    return row


async def require_peers(ctx: ApiDeps, workspace_id: str, **peer_ids: str) -> None:
    """NotFound unless the workspace and every named peer exist (keyword = the request field)."""
    await require_scope(ctx, workspace_id, (), **peer_ids)


async def require_scope(ctx: ApiDeps, workspace_id: str, session_ids: Sequence[str] = (), **peer_ids: str) -> None:
    """NotFound unless the workspace, every session and every named peer (keyword = the request field)
    exist; one query, for read paths where each round trip shows in the latency."""
    async with ctx.engine.connect() as conn:
        await check_scope(conn, workspace_id, session_ids, **peer_ids)


async def check_scope(
    conn: AsyncConnection, workspace_id: str, session_ids: Sequence[str] = (), **peer_ids: str
) -> None:
    """`require_scope` on a connection the caller goes on reading with."""
    v.check_id("workspace_id", workspace_id)
    for session_id in session_ids:
        v.check_id("session_id", session_id)
    for kind, peer_id in peer_ids.items():
        v.check_id(kind, peer_id)
    known = await workspace_reads.known(conn, workspace_id, sorted(set(peer_ids.values())), list(session_ids))
    if not known.workspace:
        raise NotFound(f"workspace {workspace_id!r} does not exist; create it with GetOrCreateWorkspace")
    view = auth.narrow_view(workspace_id)
    visible = known.sessions if view is None else await _seen(conn, workspace_id, known.sessions, view)
    sessions = [repr(s) for s in session_ids if s not in visible]
    if sessions:
        raise NotFound(
            f"session {v.listed(sessions)} does not exist in workspace {workspace_id!r}"
            f"{'' if view is None else ' or this token may not see it'}; create it with GetOrCreateSession"
        )
    missing = [f"{kind} {p!r}" for kind, p in peer_ids.items() if p not in known.peers]
    if missing:
        raise NotFound(
            f"no such peer in workspace {workspace_id!r}: {v.listed(missing)}; create it with GetOrCreatePeer"
        )


async def _seen(conn: AsyncConnection, workspace_id: str, sessions: frozenset[str], view: NarrowView) -> set[str]:
    """The sessions a narrow token sees: those it names and those its peers have been members of. The
    rest read as missing, so that such a token cannot tell which session ids exist."""
    named = sessions & view.sessions
    return named | await session_reads.seen_by(conn, workspace_id, view.peers, sessions - named)


async def _known_peers(ctx: ApiDeps, workspace_id: str, peer_ids) -> set[str]:
    async with ctx.engine.connect() as conn:
        return await peer_reads.existing_peers(conn, workspace_id, sorted(set(peer_ids)))


def check_peer_ids(peer_ids: Sequence[str]) -> None:
    for p in peer_ids:
        v.check_id("peer_id", p)
    v.check_distinct("peer_id", peer_ids)


async def check_members(ctx: ApiDeps, workspace_id: str, peer_ids: Sequence[str]) -> None:
    check_peer_ids(peer_ids)
    known = await _known_peers(ctx, workspace_id, peer_ids)
    missing = [p for p in peer_ids if p not in known]
    if missing:
        raise NotFound(
            f"peer(s) {v.listed([repr(p) for p in missing])} do not exist in workspace {workspace_id!r}; "
            "create them with GetOrCreatePeer"
        )


def validate_messages(new: Sequence[NewMessage]) -> None:
    v.check_message_count(len(new))
    for i, m in enumerate(new):
        v.check_id(f"messages[{i}].peer_id", m.peer_id)
        v.check_content(i, m.content)
        v.check_metadata(f"messages[{i}].metadata", m.metadata)
        if m.created_at is not None:
            v.check_created_at(i, m.created_at)
        if m.message_id:
            v.check_id(f"messages[{i}].message_id", m.message_id)
    v.check_distinct("message_id", [m.message_id for m in new if m.message_id])
