"""Audit reads: an observation's premise DAG down to its source messages, its history, rejected writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from sqlalchemy import RowMapping

from projections import audit_reads, message_reads
from services.api import validation as v
from services.api.cursors import time_id
from services.api.deps import ApiDeps
from services.api.guards import require_peers, require_workspace
from services.api.observation_reads import ObservationView, observation_row, with_provenance
from services.api.preflight import preflight
from services.api.reads import Page, page, reply_bytes
from services.errors import InvalidArgument, NotFound

MAX_DAG_NODES = 1_000


@dataclass(frozen=True)
class RejectionFilter:
    """Which rejected writes a ListRejectedObservations page shows."""

    workspace_id: str
    observer_id: str
    observed_id: str
    dream_id: str
    limit: int
    page_token: str


@dataclass(frozen=True)
class ProvenanceNode:
    view: ObservationView
    messages: dict[str, RowMapping]  # the source messages, by id


@dataclass(frozen=True)
class Provenance:
    root_id: str
    nodes: list[ProvenanceNode]  # root first, then breadth first
    missing_ids: list[str]
    truncated: bool


async def get_provenance(ctx: ApiDeps, workspace_id: str, observation_id: str, token: str) -> Provenance:
    await observation_row(ctx, workspace_id, observation_id, token)
    async with ctx.engine.connect() as conn:
        order, _, truncated = await audit_reads.premise_dag(conn, workspace_id, observation_id, MAX_DAG_NODES)
        rows = await audit_reads.observations_by_id(conn, workspace_id, order)
        views = await with_provenance(conn, workspace_id, [rows[i] for i in order if i in rows])
        cited = [s["message_id"] for view in views for s in view.sources]
        messages = await message_reads.messages_with_origins(conn, workspace_id, cited) if cited else {}
    nodes, cut = _within_reply(views, messages)
    return Provenance(observation_id, nodes, [i for i in order if i not in rows], truncated or cut)


def _within_reply(views: Sequence[ObservationView], messages: dict[str, RowMapping]) -> tuple[list, bool]:
    """The nodes, each with its source messages, up to what a reply of MAX_PAGE_BYTES holds (a message cited
    by several nodes is sent with each); whether something was left out. A fact reinforced by many long
    messages cites each of them: 50 of 100 kB passed the 4 MiB a default client reads."""
    nodes, total = [], 0
    for view in views:
        # each source goes out twice, in the observation and as its SourceMessage (whose message may be left
        # out): counted once, spans quoting whole messages took a reply "cut at 3.5 MB" past 4 MiB
        total += reply_bytes(view) + sum(reply_bytes(s) for s in view.sources)
        if total > v.MAX_PAGE_BYTES and nodes:
            return nodes, True
        kept: dict[str, RowMapping] = {}
        for s in view.sources:
            row = messages.get(s["message_id"])
            if row is None or s["message_id"] in kept:
                continue
            total += reply_bytes(row)
            if total > v.MAX_PAGE_BYTES:
                return [*nodes, ProvenanceNode(view, kept)], True
            kept[s["message_id"]] = row
        nodes.append(ProvenanceNode(view, kept))
    return nodes, False


HISTORY_PAGE = 1_000  # entries a history page holds unless asked for fewer
MAX_HISTORY_PAGE = 5_000


async def get_observation_history(
    ctx: ApiDeps, workspace_id: str, observation_id: str, token: str, limit: int = 0, page_token: str = ""
) -> Page:
    """A page of the observation's history: a fact reinforced or cited tens of thousands of times has as many
    entries, and sent whole they passed what a client takes in one reply (4 MiB by default)."""
    if limit > MAX_HISTORY_PAGE:
        raise InvalidArgument(f"limit {limit} is over the maximum of {MAX_HISTORY_PAGE:,}")
    scope = ("GetObservationHistory", workspace_id, observation_id)
    after = ctx.cursors.decode_time_id(scope, page_token)
    try:
        # the row only: with its sources, every page re-read all of them, and paging the history of a fact
        # reinforced n times read n sources a page
        await observation_row(ctx, workspace_id, observation_id, token)
        missing = None
    except NotFound as e:
        # a write the projector rejected is no observation, yet its id has a history: its "rejected" entry
        missing = e
    limit = limit or HISTORY_PAGE
    async with ctx.engine.connect() as conn:
        rows = await audit_reads.history(conn, workspace_id, observation_id, limit, after)
    if missing and not rows and after is None:
        raise missing
    return page(ctx, scope, rows, limit, lambda r: time_id(r["occurred_at"], r["event_id"]))


async def list_rejected(ctx: ApiDeps, request: RejectionFilter, token: str) -> Page:
    # a dream id is an id: unchecked, a NUL in it reached Postgres (INTERNAL)
    await preflight(ctx, token, ids={"dream_id": request.dream_id} if request.dream_id else None)
    if bool(request.observer_id) != bool(request.observed_id):
        raise InvalidArgument("give both observer_id and observed_id to narrow to a pair, or neither")
    if request.limit > 500:
        raise InvalidArgument(f"limit {request.limit} is over the maximum of 500")
    scope = ("ListRejectedObservations", repr(replace(request, limit=0, page_token="")))
    after = ctx.cursors.decode_time_id(scope, request.page_token)
    if request.observer_id:
        await require_peers(ctx, request.workspace_id, observer_id=request.observer_id, observed_id=request.observed_id)
    else:
        await require_workspace(ctx, request.workspace_id)
    limit = request.limit or 50
    async with ctx.engine.connect() as conn:
        rows = await audit_reads.rejections(
            conn, request.workspace_id, request.observer_id, request.observed_id, request.dream_id, limit, after
        )
    return page(ctx, scope, rows, limit, lambda r: time_id(r["rejected_at"], r["rejection_id"]))
