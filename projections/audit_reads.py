"""Read queries for the audit trail: premise DAGs, observation histories, rejected writes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import RowMapping, and_, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.observation_reads import OBSERVATION_COLUMNS, premises_of
from projections.schema import content_key_matches, observation_events, observations, rejected_observations
from services.events import PAIR_WIDE


async def observations_by_id(conn: AsyncConnection, workspace_id: str, ids: Sequence[str]) -> dict[str, RowMapping]:
    stmt = select(*OBSERVATION_COLUMNS).where(
        observations.c.workspace_id == workspace_id, observations.c.observation_id.in_(list(ids))
    )
    return {r["observation_id"]: r for r in (await conn.execute(stmt)).mappings()}


async def unsuperseded_with_content(
    conn: AsyncConnection, workspace_id: str, observer_id: str, observed_id: str, derivation: str, key: str
) -> dict[str, RowMapping]:
    """The pair's observations in `derivation` (or written by a client) whose normalised content is `key`
    (via observations_by_key_hash), live or deleted. Deleted ones too: what was deleted is not to be written
    again from the same premises; a superseded one was outdated, not withdrawn, and may be said again."""
    o = observations.c
    stmt = select(*OBSERVATION_COLUMNS).where(
        o.workspace_id == workspace_id,
        o.observer_id == observer_id,
        o.observed_id == observed_id,
        content_key_matches(key),
        o.derivation.in_([derivation, PAIR_WIDE]),  # what clients wrote is in every derivation
        o.superseded_by.is_(None),
    )
    return {r["observation_id"]: r for r in (await conn.execute(stmt)).mappings()}


async def premise_dag(
    conn: AsyncConnection, workspace_id: str, root_id: str, limit: int
) -> tuple[list[str], dict[str, list[str]], bool]:
    """The ids under `root_id` breadth first (root first, each once), every node's premise ids, and
    whether the walk stopped at `limit` nodes. Level by level: a DAG is shallow, and each level is one query."""
    order, edges, frontier, cut = [root_id], {}, [root_id], False
    while frontier and len(order) < limit:
        found = await premises_of(conn, workspace_id, frontier)
        edges.update(found)
        beyond = list(dict.fromkeys(p for node in frontier for p in found[node] if p not in edges and p not in order))
        frontier, cut = beyond[: limit - len(order)], len(beyond) > limit - len(order)
        order += frontier
    if frontier and not cut:  # the walk stopped at the limit: cut only if the last level rests on more
        found = await premises_of(conn, workspace_id, frontier)
        edges.update(found)
        cut = any(p not in order for node in frontier for p in found[node])
    truncated = cut
    for node in order:
        edges.setdefault(node, [])
    return order, edges, truncated


async def history(
    conn: AsyncConnection,
    workspace_id: str,
    observation_id: str,
    limit: int,
    after: tuple[datetime, str] | None = None,
) -> Sequence[RowMapping]:
    """At most `limit` entries of the observation's history, oldest first, after the entry `after`."""
    h = observation_events.c
    stmt = select(observation_events).where(h.workspace_id == workspace_id, h.observation_id == observation_id)
    if after is not None:
        stmt = stmt.where(tuple_(h.occurred_at, h.event_id) > tuple_(*after))
    stmt = stmt.order_by(h.occurred_at, h.event_id).limit(limit)
    return (await conn.execute(stmt)).mappings().all()


async def rejections(
    conn: AsyncConnection,
    workspace_id: str,
    observer_id: str,
    observed_id: str,
    dream_id: str,
    limit: int,
    after: tuple[datetime, str] | None = None,
) -> Sequence[RowMapping]:
    """Newest first (ties by id); `after` is the (rejected_at, rejection_id) a previous page ended on."""
    r = rejected_observations.c
    stmt = select(rejected_observations).where(r.workspace_id == workspace_id)
    if observer_id:
        stmt = stmt.where(r.observer_id == observer_id, r.observed_id == observed_id)
    if dream_id:
        stmt = stmt.where(r.dream_id == dream_id)
    if after is not None:
        at, rejection_id = after
        stmt = stmt.where(or_(r.rejected_at < at, and_(r.rejected_at == at, r.rejection_id > rejection_id)))
    return (await conn.execute(stmt.order_by(r.rejected_at.desc(), r.rejection_id).limit(limit))).mappings().all()
