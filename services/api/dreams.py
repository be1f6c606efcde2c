"""Dreams from the API: force one for a pair (a DreamForced event the scheduler de-duplicates), list them."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from projections import configurations, status_reads
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.guards import require_peers
from services.api.preflight import preflight
from services.api.writes import commit
from services.errors import FailedPrecondition, InvalidArgument
from services.events import ConfigLevel, DreamForced, resolve
from services.events.configuration import Resolved

MAX_REASON_CHARS = 1_000

# where the switch was turned off, and how to turn it on; past the global level, the scheduler takes it from
# the pair's latest perceived message, so a level set now counts from the pair's next message
TURNED_OFF_BY = {
    ConfigLevel.GLOBAL: "the global level turns them off (PEERLOG_REASONING_DREAMS)",
    ConfigLevel.WORKSPACE: "the workspace's configuration turned them off; turn them on with "
    "SetWorkspaceConfiguration, for the pair's next message",
    ConfigLevel.SESSION: "session {session!r}, of the pair's latest message, turned them off; turn them on with "
    "SetSessionConfiguration, for the pair's next message in it",
    ConfigLevel.MESSAGE: "the pair's latest message (in session {session!r}) turned them off by its own "
    "configuration; its next message decides anew",
}


async def schedule_dream(ctx: ApiDeps, workspace_id: str, observer_id: str, observed_id: str, reason: str) -> str:
    """Append the request; returns the consistency token (the scheduler decides what it leads to)."""
    observed_id = observed_id or observer_id
    v.check_text("reason", reason, MAX_REASON_CHARS, required=False)
    await require_peers(ctx, workspace_id, observer_id=observer_id, observed_id=observed_id)
    await _require_dreams_on(ctx, workspace_id, observer_id, observed_id)
    event = DreamForced(
        workspace_id=workspace_id,
        observer_id=observer_id,
        observed_id=observed_id,
        reason=reason,
        producer=ctx.producer,
    )
    return await commit(ctx, [event], wait=False)


async def _require_dreams_on(ctx: ApiDeps, workspace_id: str, observer_id: str, observed_id: str) -> None:
    """Refuse a dream the scheduler would not request (the caller would wait for a dream that never comes), or
    one past an operator's switch."""
    async with ctx.engine.connect() as conn:
        latest = await status_reads.latest_perception(conn, workspace_id, observer_id, observed_id)
        switch = await _dreams_switch(conn, ctx, workspace_id, latest)
    if not switch.value:
        where = TURNED_OFF_BY[switch.level].format(session=latest and latest["session_id"])
        raise FailedPrecondition(
            f"dreams are off for ({observer_id!r}, {observed_id!r}) in workspace {workspace_id!r}: {where}"
        )


async def _dreams_switch(conn: AsyncConnection, ctx: ApiDeps, workspace_id: str, latest: RowMapping | None) -> Resolved:
    """The pair's dreams switch as the scheduler holds it: the configuration the router resolved for the pair's
    `latest` perceived message (its own level as it came, not as set since: the router routed it under that)."""
    if latest is not None:
        levels = await configurations.message_levels(conn, workspace_id, latest["message_id"], latest["recorded_at"])
        return resolve(ctx.configuration, *levels).settings["dreams"]
    # none perceived (client observations only, or reasoning off): the scheduler goes by the global level; the
    # workspace's own "off" refuses too, so any peer's token does not force a dream past an operator's switch
    global_ = resolve(ctx.configuration).settings["dreams"]
    workspace = (await configurations.levels(conn, workspace_id)).workspace
    return resolve(ctx.configuration, workspace).settings["dreams"] if global_.value else global_


async def list_dreams(
    ctx: ApiDeps, workspace_id: str, observer_id: str, observed_id: str, limit: int, token: str
) -> Sequence[RowMapping]:
    await preflight(ctx, token)
    observed_id = observed_id or observer_id
    if limit > 100:
        raise InvalidArgument(f"limit {limit} is over the maximum of 100")
    await require_peers(ctx, workspace_id, observer_id=observer_id, observed_id=observed_id)
    async with ctx.engine.connect() as conn:
        return await status_reads.dreams_of(conn, workspace_id, observer_id, observed_id, limit or 20)
