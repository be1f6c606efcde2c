"""Dreams from the API: force one for a pair (a DreamForced event the scheduler de-duplicates), list them."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import RowMapping

from projections import configurations, status_reads
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.guards import require_peers
from services.api.preflight import preflight
from services.api.writes import commit
from services.errors import FailedPrecondition, InvalidArgument
from services.events import DreamForced, resolve

MAX_REASON_CHARS = 1_000


async def schedule_dream(ctx: ApiDeps, workspace_id: str, observer_id: str, observed_id: str, reason: str) -> str:
    """Append the request; returns the consistency token (the scheduler decides what it leads to)."""
    observed_id = observed_id or observer_id
    v.check_text("reason", reason, MAX_REASON_CHARS, required=False)
    await require_peers(ctx, workspace_id, observer_id=observer_id, observed_id=observed_id)
    await _require_dreams_on(ctx, workspace_id)
    event = DreamForced(
        workspace_id=workspace_id,
        observer_id=observer_id,
        observed_id=observed_id,
        reason=reason,
        producer=ctx.producer,
    )
    return await commit(ctx, [event], wait=False)


async def _require_dreams_on(ctx: ApiDeps, workspace_id: str) -> None:
    """Refuse a dream where the workspace's configuration (or the global level) turns dreams off: the
    scheduler would not request it, and the caller would wait for a dream that never comes."""
    async with ctx.engine.connect() as conn:
        levels = await configurations.levels(conn, workspace_id)
    if not resolve(ctx.configuration, *levels)["dreams"]:
        raise FailedPrecondition(
            f"dreams are off in workspace {workspace_id!r} (its configuration, or PEERLOG_REASONING_DREAMS); "
            "turn them on with SetWorkspaceConfiguration to dream"
        )


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
