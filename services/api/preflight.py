"""The pre-flight every read runs before it queries: wait for the caller's consistency token, then check
that what the request names exists. One place, so every read answers the same codes in the same order."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import RowMapping

from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.guards import require_peers, require_session, require_workspace


async def preflight(
    ctx: ApiDeps,
    token: str,
    workspace_id: str | None = None,
    *,
    ids: Mapping[str, str] | None = None,
    session_id: str | None = None,
    peers: Mapping[str, str] | None = None,
) -> RowMapping | None:
    """Wait until the projections include `token` (Unavailable after the timeout), then, in this order:
    check `ids` (request field -> id of what the read looks up; InvalidArgument); with `peers` (request
    field -> peer id), NotFound unless the workspace and those peers exist; with `session_id`, unless the
    session does; with neither, unless the workspace does. Returns the session's or the workspace's row
    when it is the one checked; no `workspace_id`: only the wait (the read checks its scope itself)."""
    await ctx.freshness.wait(token)
    for field, value in (ids or {}).items():
        v.check_id(field, value)
    if workspace_id is None:
        return None
    if peers is not None:
        await require_peers(ctx, workspace_id, **peers)
    if session_id is not None:
        return await require_session(ctx, workspace_id, session_id)
    return await require_workspace(ctx, workspace_id) if peers is None else None
