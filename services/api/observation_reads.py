"""Read-side service functions of a pair's store: list, get, search, and processing status."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from projections import observation_reads, status_reads
from projections.observation_reads import ObservationFilter
from projections.status_reads import StatusScope
from services.api import validation as v
from services.api.cursors import time_id
from services.api.deps import ApiDeps
from services.api.preflight import preflight
from services.api.reads import Page, fitting, page
from services.api.scopes import recall_sessions
from services.errors import NotFound

MAX_DEAD_LETTERED_SHOWN = 100
# sources shown with an observation: each reinforcement adds one, so a fact said again and again would
# otherwise carry thousands into every reply about it (past 4 MiB at about 40,000)
MAX_SOURCES_SHOWN = 100


@dataclass(frozen=True)
class ObservationView:
    """An observation row with its provenance. Search results also carry `row["distance"]`."""

    row: RowMapping
    sources: Sequence[RowMapping]  # the first MAX_SOURCES_SHOWN
    premise_ids: Sequence[str]
    source_count: int = 0  # in all


@dataclass(frozen=True)
class SearchQuery:
    pair: ObservationFilter
    text: str
    top_k: int = 0
    max_distance: float | None = None
    scope_id: str = ""  # a scope whose sessions (as of the search) bound the observations


@dataclass(frozen=True)
class ProcessingStatus:
    counts: dict[str, int]
    dead_lettered: Sequence[RowMapping]
    dreams: dict[str, int]
    dead_summaries: Sequence[RowMapping] = ()


async def with_provenance(
    conn: AsyncConnection,
    workspace_id: str,
    rows: Sequence[RowMapping],
    as_of: datetime | None = None,
    allowed: Sequence[str] | None = None,
) -> list[ObservationView]:
    """`rows` with their first sources (as of `as_of`, if given: those recorded by then) and premise ids; with
    an allowlist of sessions, only the sources sent in those (as Chat's source_messages shows them)."""
    ids = [r["observation_id"] for r in rows]
    sources = await observation_reads.first_sources(conn, workspace_id, ids, MAX_SOURCES_SHOWN, as_of, allowed)
    premises = await observation_reads.premises_of(conn, workspace_id, ids)
    return [
        ObservationView(
            r,
            sources[r["observation_id"]].rows,
            premises[r["observation_id"]],
            sources[r["observation_id"]].count,
        )
        for r in rows
    ]


async def observation_row(ctx: ApiDeps, workspace_id: str, observation_id: str, token: str = "") -> RowMapping:
    """The observation's row, without its provenance, once `token` is projected; NotFound if it does not
    exist. For a read that only needs to know it exists: its sources may number tens of thousands."""
    await preflight(ctx, token, workspace_id, ids={"observation_id": observation_id})
    async with ctx.engine.connect() as conn:
        return await _existing(conn, workspace_id, observation_id)


async def get_observation(ctx: ApiDeps, workspace_id: str, observation_id: str, token: str = "") -> ObservationView:
    """The observation with its provenance once `token` is projected; NotFound if it does not exist."""
    await preflight(ctx, token, workspace_id, ids={"observation_id": observation_id})
    async with ctx.engine.connect() as conn:
        row = await _existing(conn, workspace_id, observation_id)
        return (await with_provenance(conn, workspace_id, [row]))[0]


async def _existing(conn: AsyncConnection, workspace_id: str, observation_id: str) -> RowMapping:
    row = await observation_reads.observation(conn, workspace_id, observation_id)
    if row is None:
        raise NotFound(f"observation {observation_id!r} does not exist in workspace {workspace_id!r}")
    return row


async def _preflight(ctx: ApiDeps, pair: ObservationFilter, token: str) -> None:
    await preflight(
        ctx,
        token,
        pair.workspace_id,
        # a derivation's name is an id: unchecked, a NUL in it reached Postgres (INTERNAL), and any length passed
        ids={"derivation": pair.derivation} if pair.derivation else None,
        peers={"observer_id": pair.observer_id, "observed_id": pair.observed_id},
        session_id=pair.session_id or None,
    )


def _scope(pair: ObservationFilter, reverse: bool, asked_as_of: str) -> tuple[str, ...]:
    """What a ListObservations page token is valid for: this list, this pair and filter, this direction, the
    as_of as asked. Not as resolved: a time not yet past reads as now (convert.as_of), and once it passed the
    same request resolved to another value, which refused the token its own first page had given."""
    return ("ListObservations", repr(replace(pair, as_of=None)), asked_as_of, str(reverse))


def _position(view: ObservationView) -> str:
    return time_id(view.row["created_at"], view.row["observation_id"])


async def list_observations(
    ctx: ApiDeps, pair: ObservationFilter, size: int, page_token: str, reverse: bool, token: str, asked_as_of: str = ""
) -> Page:
    """One page of a pair's observations, with their provenance; `asked_as_of`: the request's as_of as sent."""
    scope = _scope(pair, reverse, asked_as_of)
    limit, after = v.page_size(size), ctx.cursors.decode_time_id(scope, page_token)
    await _preflight(ctx, pair, token)
    async with ctx.engine.connect() as conn:
        rows = await observation_reads.list_observations(conn, pair, after, limit, reverse)
        views = await with_provenance(conn, pair.workspace_id, rows, pair.as_of, pair.allowed_sessions)
    return page(ctx, scope, views, limit, _position)


async def search_observations(ctx: ApiDeps, query: SearchQuery, token: str) -> tuple[list[ObservationView], bool]:
    """The pair's live observations nearest to the query text, nearest first, as many as a reply of
    MAX_PAGE_BYTES holds; whether some were left out for that."""
    v.check_text("query", query.text, v.MAX_QUERY_CHARS)
    limit, max_distance = v.top_k(query.top_k), v.check_max_distance(query.max_distance)
    await _preflight(ctx, query.pair, token)
    (vector,) = await ctx.embedder.embed([query.text])
    async with ctx.engine.connect() as conn:
        pair = query.pair
        if query.scope_id:
            pair = replace(
                pair, allowed_sessions=await recall_sessions(conn, pair.workspace_id, query.scope_id, (), pair.as_of)
            )
        rows = await observation_reads.nearest_observations(conn, pair, vector, limit, max_distance)
        views = await with_provenance(conn, pair.workspace_id, rows, pair.as_of, pair.allowed_sessions)
    kept = list(fitting(views))
    return kept, len(kept) < len(views)


async def processing_status(ctx: ApiDeps, scope: StatusScope, token: str) -> ProcessingStatus:
    """Perceived messages in scope by derivation state, the dead-lettered batches among them, and the
    pairs' dreams by state."""
    named = {k: p for k, p in (("observer_id", scope.observer_id), ("observed_id", scope.observed_id)) if p}
    await preflight(ctx, token, scope.workspace_id, peers=named, session_id=scope.session_id or None)
    async with ctx.engine.connect() as conn:
        counts = await status_reads.processing_counts(conn, scope)
        dead = await status_reads.dead_lettered_batches(conn, scope, MAX_DEAD_LETTERED_SHOWN)
        dreams = await status_reads.dream_counts(conn, scope)
        dead_summaries = await status_reads.dead_lettered_summaries(conn, scope, MAX_DEAD_LETTERED_SHOWN)
    return ProcessingStatus(counts, dead, dreams, dead_summaries)
