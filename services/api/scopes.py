"""Scopes (issue 13 §1): create, list, get, add and remove sessions; and what a read's scope resolves to.

A read given a scope takes the scope's sessions as they stood at its own time (its snapshot, or as_of)
and uses them as a session allowlist (projections/observation_reads.py: derived observations only when their
whole premise closure is vouched for). An empty result is an allowlist of nothing, never "every session".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from projections import scope_reads
from services.api import auth
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.guards import check_scope
from services.api.preflight import preflight
from services.api.reads import Page, fitting, ids_bytes, page, reply_bytes
from services.api.writes import commit
from services.errors import AlreadyExists, InvalidArgument, NotFound
from services.events import ScopeCreated, ScopeSessionsAdded, ScopeSessionsRemoved

MAX_NAME_CHARS = 200
# a scope's sessions go whole into every reply about it: 1,000 ids of 512 characters are half a megabyte
MAX_SCOPE_SESSIONS = 1_000


@dataclass(frozen=True)
class ScopeView:
    row: RowMapping
    session_ids: tuple[str, ...]


def _check_sessions(session_ids: Sequence[str], required: bool) -> None:
    if required and not session_ids:
        raise InvalidArgument("session_ids is empty: name 1–100 sessions")
    v.check_id_count("session_ids", session_ids)
    for s in session_ids:
        v.check_id("session_id", s)
    v.check_distinct("session_id", session_ids)


def _unknown(workspace_id: str, scope_id: str) -> NotFound:
    return NotFound(f"scope {scope_id!r} does not exist in workspace {workspace_id!r}; create it with CreateScope")


async def _require(conn: AsyncConnection, workspace_id: str, scope_id: str) -> RowMapping:
    v.check_id("scope_id", scope_id)
    row = await scope_reads.scope(conn, workspace_id, scope_id)
    if row is None:
        raise _unknown(workspace_id, scope_id)
    return row


async def _view(ctx: ApiDeps, workspace_id: str, scope_id: str, as_of: datetime | None = None) -> ScopeView:
    async with ctx.engine.connect() as conn:
        await check_scope(conn, workspace_id)
        row = await _require(conn, workspace_id, scope_id)
        sessions = await scope_reads.scope_sessions(conn, workspace_id, [scope_id], as_of)
    return ScopeView(row, sessions[scope_id])


async def _unless_created_as(conn: AsyncConnection, row: RowMapping, name: str, session_ids: Sequence[str]) -> None:
    """AlreadyExists unless the scope `row` is what this request creates: the same name, and the same sessions
    as it was created with, whatever changed them since (a create sent again after an UNAVAILABLE, which
    landed, gets the scope it made)."""
    if row["name"] != name or await scope_reads.created_sessions(conn, row) != set(session_ids):
        raise AlreadyExists(
            f"scope {row['scope_id']!r} already exists in workspace {row['workspace_id']!r} with another name "
            "or other first sessions; change its sessions with AddScopeSessions / RemoveScopeSessions"
        )


async def create_scope(
    ctx: ApiDeps, workspace_id: str, scope_id: str, name: str, session_ids: Sequence[str]
) -> tuple[ScopeView, str]:
    """A new scope; sent again as it was (after an UNAVAILABLE whose create landed), the scope it made."""
    v.check_id("scope_id", scope_id)
    v.check_text("name", name, MAX_NAME_CHARS, required=False)
    _check_sessions(session_ids, required=False)
    async with ctx.exclusive("scope", workspace_id, scope_id):
        async with ctx.engine.connect() as conn:
            await check_scope(conn, workspace_id, session_ids)
            row = await scope_reads.scope(conn, workspace_id, scope_id)
            if row is not None:
                await _unless_created_as(conn, row, name, session_ids)
        if row is not None:
            return await _view(ctx, workspace_id, scope_id), ""  # readable already: a read needs no token
        event = ScopeCreated(
            workspace_id=workspace_id,
            scope_id=scope_id,
            name=name,
            session_ids=tuple(session_ids),
            producer=ctx.producer,
        )
        token = await commit(ctx, [event])
    view = await _view(ctx, workspace_id, scope_id)
    if view.row["event_id"] != event.event_id:  # another API process created it first: this request's twin?
        async with ctx.engine.connect() as conn:
            await _unless_created_as(conn, view.row, name, session_ids)
    return view, token


async def change_sessions(
    ctx: ApiDeps, workspace_id: str, scope_id: str, session_ids: Sequence[str], add: bool
) -> tuple[ScopeView, str]:
    """Adds (removes) sessions; only the ones that change the scope go on the log."""
    _check_sessions(session_ids, required=True)
    async with ctx.exclusive("scope", workspace_id, scope_id):
        async with ctx.engine.connect() as conn:
            await check_scope(conn, workspace_id, session_ids if add else ())
            await _require(conn, workspace_id, scope_id)
            now = set((await scope_reads.scope_sessions(conn, workspace_id, [scope_id]))[scope_id])
        changed = tuple(s for s in session_ids if (s not in now) == add)
        if add and len(now) + len(changed) > MAX_SCOPE_SESSIONS:
            raise InvalidArgument(
                f"scope {scope_id!r} holds {len(now)} sessions; adding {len(changed)} would pass the limit of "
                f"{MAX_SCOPE_SESSIONS} a scope holds. Remove some, or make another scope"
            )
        kind = ScopeSessionsAdded if add else ScopeSessionsRemoved
        events = (
            [kind(workspace_id=workspace_id, scope_id=scope_id, session_ids=changed, producer=ctx.producer)]
            if changed
            else []
        )
        token = await commit(ctx, events)
    return await _view(ctx, workspace_id, scope_id), token


async def get_scope(ctx: ApiDeps, workspace_id: str, scope_id: str, as_of: datetime | None, token: str) -> ScopeView:
    await preflight(ctx, token)
    return await _view(ctx, workspace_id, scope_id, as_of)


async def list_scopes(ctx: ApiDeps, workspace_id: str, size: int, page_token: str, token: str) -> Page:
    """A page of the workspace's scopes (ScopeView), by id."""
    await preflight(ctx, token)
    limit, cursor_scope = v.page_size(size), ("ListScopes", workspace_id)
    after = ctx.cursors.decode_id(cursor_scope, page_token)
    async with ctx.engine.connect() as conn:
        await check_scope(conn, workspace_id)
        rows = await scope_reads.list_scopes(conn, workspace_id, after, limit)
        kept = await _fitting_scopes(conn, workspace_id, rows)
        sessions = await scope_reads.scope_sessions(conn, workspace_id, [r["scope_id"] for r in kept])
    views = [ScopeView(r, sessions[r["scope_id"]]) for r in kept]
    return page(ctx, cursor_scope, views, limit, lambda view: view.row["scope_id"], read=len(rows))


async def _fitting_scopes(conn: AsyncConnection, workspace_id: str, rows: Sequence[RowMapping]) -> Sequence[RowMapping]:
    """The first of the scopes `rows` whose views fit one page, sized from counts: reading every session of
    1,000 scopes of 999 sessions, to keep a few of them, took 8 s."""
    sizes = await scope_reads.session_id_sizes(conn, workspace_id, [r["scope_id"] for r in rows])
    return fitting(rows, size=lambda r: reply_bytes(r) + ids_bytes(*sizes[r["scope_id"]]))


async def recall_sessions(
    conn: AsyncConnection, workspace_id: str, scope_id: str, session_ids: Sequence[str], as_of: datetime | None = None
) -> tuple[str, ...] | None:
    """The sessions a read may recall from: the allowlist, narrowed to the scope's sessions (as they stood
    at `as_of`) when a scope is named; None when neither bounds it. NotFound for an unknown scope, unless
    the call's token is narrower than the workspace."""
    if not scope_id:
        return tuple(session_ids) if session_ids else None
    v.check_id("scope_id", scope_id)
    if await scope_reads.scope(conn, workspace_id, scope_id) is None:
        if auth.narrow_view(workspace_id) is not None:
            return ()  # a token that cannot read scopes must not learn which exist: an unknown one recalls nothing
        raise _unknown(workspace_id, scope_id)
    in_scope = (await scope_reads.scope_sessions(conn, workspace_id, [scope_id], as_of))[scope_id]
    return tuple(s for s in session_ids if s in in_scope) if session_ids else in_scope
