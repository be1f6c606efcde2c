"""Which derivation of a pair's store is current: the projection of DerivationPromoted and the read helpers.

A read that names no derivation follows the pair's latest promotion (as of a past time: the latest by then);
one that names a derivation reads it by name (ORIGINAL for the first live derivation, stored as "").
Promotion rewrites nothing: only which derivation reads follow changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, func, literal, select
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.inserts import insert_new
from projections.schema import derivation_promotions
from services.events import DerivationPromoted


def derivation_promoted(conn: Connection, events: Sequence[DerivationPromoted]) -> None:
    # one at a time, in log order: each is numbered after the pair's previous promotions
    d = derivation_promotions.c
    for e in events:
        last = conn.scalar(
            select(func.max(d.seq)).where(
                d.workspace_id == e.workspace_id, d.observer_id == e.observer_id, d.observed_id == e.observed_id
            )
        )
        insert_new(
            conn,
            derivation_promotions,
            [
                dict(
                    workspace_id=e.workspace_id,
                    observer_id=e.observer_id,
                    observed_id=e.observed_id,
                    seq=(last or 0) + 1,
                    derivation=e.derivation,
                    reason=e.reason,
                    promoted_at=e.occurred_at,
                    event_id=e.event_id,
                )
            ],
        )


def current_label(workspace_id, observer_id, observed_id, as_of: datetime | None = None):
    """The stored label of the pair's current derivation (or the one current at `as_of`) as an SQL
    expression; "" when it was never promoted. The pair may be values or columns (a correlated lookup)."""
    d = derivation_promotions.c
    latest = select(d.derivation).where(
        d.workspace_id == workspace_id, d.observer_id == observer_id, d.observed_id == observed_id
    )
    if as_of is not None:
        latest = latest.where(d.promoted_at <= as_of)
    return func.coalesce(latest.order_by(d.seq.desc()).limit(1).scalar_subquery(), literal(""))


async def current_derivation(conn: AsyncConnection, workspace_id: str, observer_id: str, observed_id: str) -> str:
    """The stored label of the pair's current derivation, for writers that must stamp it on their events."""
    return await conn.scalar(select(current_label(workspace_id, observer_id, observed_id)))
