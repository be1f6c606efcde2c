"""Reads of peers and of their peer cards (asyncio). Every query is scoped by workspace."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import RowMapping, bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.schema import PEER_DISPLAY_NAME, peer_cards, peers


async def peer(conn: AsyncConnection, workspace_id: str, peer_id: str) -> RowMapping | None:
    stmt = select(peers).where(peers.c.workspace_id == workspace_id, peers.c.peer_id == peer_id)
    return (await conn.execute(stmt)).mappings().first()


async def display_names(conn: AsyncConnection, workspace_id: str, peer_ids: Sequence[str]) -> dict[str, str]:
    """The display names (metadata `name`) of those peers that have one, by id."""
    stmt = select(peers.c.peer_id, PEER_DISPLAY_NAME).where(
        peers.c.workspace_id == workspace_id, peers.c.peer_id.in_(list(peer_ids)), PEER_DISPLAY_NAME != ""
    )
    return dict((await conn.execute(stmt)).all())


async def existing_peers(conn: AsyncConnection, workspace_id: str, peer_ids: Sequence[str]) -> set[str]:
    stmt = select(peers.c.peer_id).where(peers.c.workspace_id == workspace_id, peers.c.peer_id.in_(list(peer_ids)))
    return set((await conn.scalars(stmt)).all())


async def list_peers(conn: AsyncConnection, workspace_id: str, after: str, limit: int) -> Sequence[RowMapping]:
    stmt = (
        select(peers)
        .where(peers.c.workspace_id == workspace_id, peers.c.peer_id > after)
        .order_by(peers.c.peer_id)
        .limit(limit)
    )
    return (await conn.execute(stmt)).mappings().all()


@functools.cache
def card_statement(as_of: bool = False):
    """A pair's latest card (binds workspace_id, observer_id, observed_id, and as_of when asked): what reads
    show, and what a dream's card is checked against when it is projected (memory_handlers)."""
    c = peer_cards.c
    return (
        select(peer_cards)
        .where(
            c.workspace_id == bindparam("workspace_id"),
            c.observer_id == bindparam("observer_id"),
            c.observed_id == bindparam("observed_id"),
        )
        .where(c.updated_at <= bindparam("as_of") if as_of else True)
        .order_by(c.updated_at.desc(), c.event_id.desc())
        .limit(1)
    )


async def peer_card(
    conn: AsyncConnection, workspace_id: str, observer_id: str, observed_id: str, as_of: datetime | None = None
) -> RowMapping | None:
    """The latest card of a pair (as it stood at `as_of`, if given), or None."""
    values = {"workspace_id": workspace_id, "observer_id": observer_id, "observed_id": observed_id, "as_of": as_of}
    return (await conn.execute(card_statement(as_of is not None), values)).mappings().first()
