"""Which derivation of a pair's store is current: the projection of DerivationPromoted and the read helpers.

A read that names no derivation follows the pair's pointer; one that names a derivation reads it by name
(ORIGINAL for the first live derivation, stored as ""). Promotion rewrites nothing: only the pointer moves.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, func, literal, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.schema import current_derivations
from services.events import DerivationPromoted


def derivation_promoted(conn: Connection, events: Sequence[DerivationPromoted]) -> None:
    # one statement per event, in log order: a batch may promote the same pair twice
    for e in events:
        row = dict(workspace_id=e.workspace_id, observer_id=e.observer_id, observed_id=e.observed_id,
                   derivation=e.derivation, reason=e.reason, promoted_at=e.occurred_at, event_id=e.event_id)
        stmt = insert(current_derivations).values(**row)
        conn.execute(stmt.on_conflict_do_update(index_elements=["workspace_id", "observer_id", "observed_id"],
                                                set_={k: stmt.excluded[k] for k in row}))


def current_label(workspace_id, observer_id, observed_id):
    """The stored label of the pair's current derivation, as an SQL expression ("" when never promoted).

    The arguments may be values or columns (a correlated lookup per row)."""
    d = current_derivations.c
    pointer = (select(d.derivation).where(d.workspace_id == workspace_id, d.observer_id == observer_id,
                                          d.observed_id == observed_id).scalar_subquery())
    return func.coalesce(pointer, literal(""))


async def current_derivation(conn: AsyncConnection, workspace_id: str, observer_id: str, observed_id: str) -> str:
    """The stored label of the pair's current derivation, for writers that must stamp it on their events."""
    return await conn.scalar(select(current_label(workspace_id, observer_id, observed_id)))
