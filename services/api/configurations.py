"""The configuration hierarchy's RPCs: set a workspace's, a session's or a message's level, read the effective
settings."""

from __future__ import annotations

from datetime import datetime

from projections import configurations as stored
from projections import message_reads
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.guards import require_session, require_workspace
from services.api.preflight import preflight
from services.api.writes import commit
from services.errors import NotFound
from services.events import (
    Configuration,
    Effective,
    MessageConfigured,
    SessionConfigured,
    WorkspaceConfigured,
    resolve,
)


async def set_workspace(ctx: ApiDeps, workspace_id: str, config: Configuration) -> str:
    """Replace the workspace level; answers once readable, so messages accepted after it are stamped with it."""
    await require_workspace(ctx, workspace_id)
    return await commit(
        ctx, [WorkspaceConfigured(workspace_id=workspace_id, configuration=config, producer=ctx.producer)]
    )


async def set_session(ctx: ApiDeps, workspace_id: str, session_id: str, config: Configuration) -> str:
    """Replace the session level (on the session's topic: it governs the messages after it in log order)."""
    await require_session(ctx, workspace_id, session_id)
    return await commit(
        ctx,
        [
            SessionConfigured(
                workspace_id=workspace_id, session_id=session_id, configuration=config, producer=ctx.producer
            )
        ],
    )


async def set_message(
    ctx: ApiDeps, workspace_id: str, session_id: str, message_id: str, config: Configuration, token: str = ""
) -> str:
    """Replace a message's own level after it was accepted (an event after it on the session's topic);
    the message is looked for once the projections hold the caller's `token` (its write)."""
    await ctx.freshness.wait(token)
    await require_session(ctx, workspace_id, session_id)
    async with ctx.engine.connect() as conn:
        row = (await message_reads.messages_by_id(conn, workspace_id, [v.check_id("message_id", message_id)])).get(
            message_id
        )
    if row is None or row["session_id"] != session_id:
        raise NotFound(f"message {message_id!r} does not exist in session {session_id!r} of workspace {workspace_id!r}")
    return await commit(
        ctx,
        [
            MessageConfigured(
                workspace_id=workspace_id,
                session_id=session_id,
                message_id=message_id,
                configuration=config,
                producer=ctx.producer,
            )
        ],
    )


async def effective(
    ctx: ApiDeps, workspace_id: str, session_id: str, message_id: str, as_of: datetime | None, token: str
) -> Effective:
    """The settings that apply, each with its level, at `as_of` (None: now): for a message (its workspace and
    session levels as it was processed under), else for the session or the workspace."""
    # a message's levels are read below, by its id; else the session's (if named) or the workspace's
    await preflight(ctx, token, workspace_id, session_id=None if message_id else session_id or None)
    if message_id:
        async with ctx.engine.connect() as conn:
            checked = v.check_id("message_id", message_id)
            levels = await stored.message_levels(conn, workspace_id, checked, as_of, session_id)
        if levels is None:
            where = f"session {session_id!r} of " if session_id else ""
            when = f" as of {as_of.isoformat()}" if as_of is not None else ""
            raise NotFound(f"message {message_id!r} does not exist in {where}workspace {workspace_id!r}{when}")
    else:
        async with ctx.engine.connect() as conn:
            levels = await stored.levels(conn, workspace_id, session_id, as_of)
    return resolve(ctx.configuration, *levels)
