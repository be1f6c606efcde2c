"""GetContext: gather the pieces from the projections, then pack them (packing.py) into the budget."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from projections import queries
from services.api.context import ApiContext
from services.api import validation as v
from services.api.packing import Line, Obs, Packed, Premise, pack
from services.api.writes import require_peers, require_session
from services.errors import InvalidArgument
from services.llm.tokens import count_tokens

MAX_BUDGET = 100_000
MAX_ALLOWED_SESSIONS = 100
MAX_MESSAGES_SCANNED = 2_000  # newest messages considered; 2,000 turns exceed any budget we allow in practice


@dataclass(frozen=True)
class ContextQuery:
    workspace_id: str
    session_id: str
    token_budget: int = MAX_BUDGET
    include_summary: bool = True
    observer_id: str = ""
    target_id: str = ""
    search_query: str = ""
    search_top_k: int = 0
    search_max_distance: float = 0.0
    include_most_reinforced: bool = True
    max_observations: int = 100
    session_ids: tuple[str, ...] = ()  # the allowlist; empty: every session
    as_of: datetime | None = None  # the store as it stood then


def _check(q: ContextQuery) -> ContextQuery:
    if not 0 <= q.token_budget <= MAX_BUDGET:
        raise InvalidArgument(f"token_budget {q.token_budget} is outside 1–{MAX_BUDGET}")
    if not 0 <= q.max_observations <= 500:
        raise InvalidArgument(f"max_observations {q.max_observations} is over the limit of 500")
    if not 0 <= q.search_max_distance <= 2:
        raise InvalidArgument("search_max_distance is a cosine distance: 0–2")
    if len(q.session_ids) > MAX_ALLOWED_SESSIONS:
        raise InvalidArgument(f"session_ids lists {len(q.session_ids)} sessions; at most {MAX_ALLOWED_SESSIONS}")
    for i, s in enumerate(q.session_ids):
        v.check_id(f"session_ids[{i}]", s)
    return q


async def _check_allowlist(ctx: ApiContext, q: ContextQuery) -> None:
    for session_id in sorted(set(q.session_ids)):
        await require_session(ctx, q.workspace_id, session_id)


def _obs(row, premises) -> Obs:
    return Obs(row["observation_id"], row["content"], row["level"], (row["created_at"], row["observation_id"]),
               session_id=row["session_id"] or "", times_derived=row["times_derived"],
               premises=tuple(Premise(p["observation_id"], p["level"], p["content"]) for p in premises),
               confidence=row["confidence"] or "", pattern_type=row["pattern_type"] or "")


async def _ranked(ctx: ApiContext, q: ContextQuery, observer: str, target: str) -> list[Obs]:
    """Semantic slice, then most reinforced, then most recent; de-duplicated, best first."""
    n = q.max_observations or 100
    where = queries.ObservationFilter(workspace_id=q.workspace_id, observer_id=observer, observed_id=target,
                                      allowed_sessions=tuple(q.session_ids) if q.session_ids else None,
                                      as_of=q.as_of)
    rows = []
    async with ctx.engine.connect() as conn:
        if q.search_query:
            vector = (await ctx.embedder.embed([q.search_query]))[0]
            rows += await queries.nearest_observations(conn, where, vector, q.search_top_k or max(1, n // 3),
                                                       q.search_max_distance or None)
        if q.include_most_reinforced:
            rows += await queries.most_reinforced(conn, where, max(1, n // 3))
        rows += await queries.list_observations(conn, where, None, n, reverse=True)
        kept = list(_dedup(rows))[:n]
        premises = await queries.premise_rows(conn, q.workspace_id, [r["observation_id"] for r in kept
                                                                     if r["level"] != "explicit"])
    return [_obs(r, premises.get(r["observation_id"], ())) for r in kept]


def _dedup(rows):
    seen = set()
    for r in rows:
        if r["observation_id"] not in seen:
            seen.add(r["observation_id"])
            yield r


async def get_context(ctx: ApiContext, q: ContextQuery, token: str) -> Packed:
    await ctx.freshness.wait(token)
    q = _check(q)
    await require_session(ctx, q.workspace_id, q.session_id)
    observer, target = q.observer_id, q.target_id or q.observer_id
    ranked, card = [], []
    if observer:
        await require_peers(ctx, q.workspace_id, observer_id=observer, target_id=target)
        await _check_allowlist(ctx, q)
        ranked = await _ranked(ctx, q, observer, target)
        async with ctx.engine.connect() as conn:
            row = await queries.peer_card(conn, q.workspace_id, observer, target)
        card = list(row["entries"]) if row else []
    async with ctx.engine.connect() as conn:
        summaries = await queries.latest_summaries(conn, q.workspace_id, q.session_id)
        recent = await queries.list_messages(conn, q.workspace_id, q.session_id, None, MAX_MESSAGES_SCANNED, True)
    lines = [Line(r["message_id"], r["peer_id"], r["content"]) for r in recent]
    short, long = (summaries[k]["content"] if k in summaries else "" for k in ("short", "long"))
    return pack(q.token_budget or MAX_BUDGET, ranked, card, short, long, lines, count_tokens, q.include_summary)


async def get_representation(ctx: ApiContext, q: ContextQuery, token: str) -> list[Obs]:
    """The working representation of (observer, target), in time order."""
    await ctx.freshness.wait(token)
    q = _check(q)
    target = q.target_id or q.observer_id
    await require_peers(ctx, q.workspace_id, observer_id=q.observer_id, target_id=target)
    await _check_allowlist(ctx, q)
    return sorted(await _ranked(ctx, q, q.observer_id, target), key=lambda o: o.created_key)
