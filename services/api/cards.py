"""Peer cards: read and replace a pair's card (each replacement is a PeerCardUpdated event)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from projections import peer_reads
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.guards import require_peers
from services.api.preflight import preflight
from services.api.writes import commit
from services.errors import InvalidArgument
from services.events import PeerCardUpdated
from services.events.cards import card_problems


@dataclass(frozen=True)
class Card:
    workspace_id: str
    observer_id: str
    observed_id: str
    entries: tuple[str, ...]
    updated_at: datetime | None
    producer: dict | None = None  # who set it (component, version, model, prompt_version)
    dream_id: str | None = None  # the dream that set it


async def get_peer_card(
    ctx: ApiDeps, workspace_id: str, observer_id: str, observed_id: str, token: str, as_of: datetime | None = None
) -> Card:
    observed_id = observed_id or observer_id
    await preflight(ctx, token, workspace_id, peers={"observer_id": observer_id, "observed_id": observed_id})
    async with ctx.engine.connect() as conn:
        row = await peer_reads.peer_card(conn, workspace_id, observer_id, observed_id, as_of)
    if row is None:
        return Card(workspace_id, observer_id, observed_id, (), None)
    return Card(
        workspace_id,
        observer_id,
        observed_id,
        tuple(row["entries"]),
        row["updated_at"],
        row["producer"],
        row["dream_id"],
    )


async def set_peer_card(
    ctx: ApiDeps, workspace_id: str, observer_id: str, observed_id: str, entries: Sequence[str]
) -> tuple[Card, str]:
    """Replace the pair's card; waits until it is readable, returns it and the consistency token."""
    observed_id = observed_id or observer_id
    problems = card_problems(entries)
    if problems:
        raise InvalidArgument("invalid peer card: " + v.listed(problems, v.SHOWN_PROBLEMS, "; "))
    await require_peers(ctx, workspace_id, observer_id=observer_id, observed_id=observed_id)
    event = PeerCardUpdated(
        workspace_id=workspace_id,
        observer_id=observer_id,
        observed_id=observed_id,
        entries=tuple(entries),
        producer=ctx.producer,
    )
    token = await commit(ctx, [event])
    return await get_peer_card(ctx, workspace_id, observer_id, observed_id, ""), token
