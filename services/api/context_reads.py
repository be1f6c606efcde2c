"""GetContext: gather the pieces from the projections, then pack them (packing.py) into the budget."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from projections import configurations, message_reads, observation_reads, peer_reads, session_reads
from projections.message_search import search_messages, search_text
from projections.search_shape import MessageSearch
from services.api import auth
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.guards import check_scope
from services.api.packing import (
    Fixed,
    Obs,
    Packed,
    Premise,
    RecentMessage,
    Relevant,
    fit_fixed,
    fit_relevant,
    pack_recent,
    render_line,
)
from services.api.preflight import preflight
from services.api.reads import fitting
from services.api.scopes import recall_sessions
from services.errors import InvalidArgument
from services.events import resolve
from services.events.times import in_zone
from services.llm.tokens import count_tokens

MAX_BUDGET = 100_000
# a representation holds at most this many observations; a larger semantic slice would be cut to it anyway
MAX_OBSERVATIONS = 500
MAX_ALLOWED_SESSIONS = 100
# newest messages considered: 2,000, or as many as the room could hold at the fewest tokens a line can take
# ("a: b" is 3), so a budget of many short turns is filled however large it is
MAX_MESSAGES_SCANNED, FEWEST_TOKENS_PER_LINE = 2_000, 2
# the newest messages are read as many as the room could hold at this many tokens a line (few turns are
# shorter), and more only when every one read fits: not a session's 2,000 newest at every call. At most
# MAX_FIRST_READ at first: the default budget (100,000) read 12,501 turns at once, which at 25,000
# characters each is 312 MB in the API to pack the 16 that fit; the reads that follow grow fourfold only
# while every turn read fit, so they stay as large as what could be packed
TOKENS_PER_RECENT_LINE, MIN_RECENT_READ, MAX_FIRST_READ = 8, 20, 256
# candidates for the relevant-messages section, by the room it gets once representation, card and summary
# are packed (packing keeps what fits): a relevant line costs ~25-40 tokens, so room // 30 leaves packing
# some to skip. With nothing else packed that is budget // 40, as measured on LoCoMo; a representation
# that fills most of the budget leaves room for a few lines, and the search then ranks fewer candidates
TOKENS_PER_CANDIDATE, MIN_CANDIDATES, MAX_CANDIDATES = 30, 10, 100
# packing counts tokens, CPU work a reader's texts size (100 relevant turns of 25,000 characters, counted
# on the event loop, held every RPC of the process for 6.6 s): it runs on threads of its own, so contexts
# wait for each other, not the query embeddings of the default executor. tiktoken lets go of the
# interpreter lock while it counts, so a few threads count side by side
_PACKERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="context-packing")


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
    scope_id: str = ""  # a scope whose sessions (as of the read) narrow the allowlist
    assistant_id: str = ""  # GetContext's chat_messages: whose turns are the assistant's
    perspective_id: str = ""  # whose sight bounds the messages packed, when not the observer's
    zone: tzinfo = UTC  # the asker's, for the search query's time words

    @property
    def reader_id(self) -> str:
        """The peer whose perspective the packed messages take (empty: none, the session as it is)."""
        return self.perspective_id or self.observer_id


def _check(q: ContextQuery) -> ContextQuery:
    # the ids before any read: the query's named peers are read before the scope is checked
    v.check_id("workspace_id", q.workspace_id)
    if not 0 <= q.token_budget <= MAX_BUDGET:
        raise InvalidArgument(f"token_budget {q.token_budget} is outside 1–{MAX_BUDGET}")
    if not 0 <= q.max_observations <= MAX_OBSERVATIONS:
        raise InvalidArgument(f"max_observations {q.max_observations} is over the limit of {MAX_OBSERVATIONS}")
    if not 0 <= q.search_top_k <= MAX_OBSERVATIONS:
        raise InvalidArgument(
            f"search_top_k {q.search_top_k} is over the limit of {MAX_OBSERVATIONS} (the most a representation holds)"
        )
    if not 0 <= q.search_max_distance <= 2:
        raise InvalidArgument("search_max_distance is a cosine distance: 0–2")
    if len(q.session_ids) > MAX_ALLOWED_SESSIONS:
        raise InvalidArgument(f"session_ids lists {len(q.session_ids)} sessions; at most {MAX_ALLOWED_SESSIONS}")
    for i, s in enumerate(q.session_ids):
        v.check_id(f"session_ids[{i}]", s)
    return q


def _obs(row, premises) -> Obs:
    return Obs(
        row["observation_id"],
        row["content"],
        row["level"],
        (row["created_at"], row["observation_id"]),
        session_id=row["session_id"] or "",
        times_derived=row["times_derived"],
        premises=tuple(Premise(p["observation_id"], p["level"], p["content"]) for p in premises),
        confidence=row["confidence"] or "",
        pattern_type=row["pattern_type"] or "",
    )


def _dedup(rows):
    seen = set()
    for r in rows:
        if r["observation_id"] not in seen:
            seen.add(r["observation_id"])
            yield r


async def _ranked(
    conn: AsyncConnection,
    q: ContextQuery,
    observer: str,
    target: str,
    vector: list[float] | None,
    allowed: tuple[str, ...] | None,
) -> list[Obs]:
    """Semantic slice (when there is a query vector), then most reinforced, then most recent;
    de-duplicated, best first."""
    n = q.max_observations or 100
    where = observation_reads.ObservationFilter(
        workspace_id=q.workspace_id, observer_id=observer, observed_id=target, allowed_sessions=allowed, as_of=q.as_of
    )
    slices = observation_reads.Slices(
        semantic=q.search_top_k or max(1, n // 3),
        max_distance=q.search_max_distance or None,
        reinforced=max(1, n // 3) if q.include_most_reinforced else 0,
        recent=n,
    )
    rows = await observation_reads.working_set(conn, where, slices, vector)
    kept = list(_dedup(rows))[:n]
    premises = await observation_reads.premise_rows(
        conn, q.workspace_id, [r["observation_id"] for r in kept if r["level"] != "explicit"], q.as_of
    )
    return [_obs(r, premises.get(r["observation_id"], ())) for r in kept]


async def _check_scope(conn: AsyncConnection, q: ContextQuery, observer: str, target: str, sessions: list[str]) -> None:
    if q.target_id and not observer:  # a target alone would be ignored: say so rather than answer without it
        raise InvalidArgument("target_id needs an observer_id: whose knowledge about the target to read")
    peers = {"observer_id": observer, "target_id": target} if observer else {}
    if q.assistant_id:
        peers["assistant_peer_id"] = q.assistant_id
    if q.perspective_id:
        peers["perspective_peer_id"] = q.perspective_id
    await check_scope(conn, q.workspace_id, list(dict.fromkeys([*sessions, *q.session_ids])), **peers)


def relevant_candidates(room: int) -> int:
    return min(MAX_CANDIDATES, max(MIN_CANDIDATES, room // TOKENS_PER_CANDIDATE))


async def _relevant(
    conn: AsyncConnection, q: ContextQuery, vector: list[float] | None, allowed: tuple[str, ...] | None, room: int
) -> list[Relevant]:
    """The past messages most relevant to the query that the reader saw (every session it was a member
    of while they were sent, within the allowlist): the message search, best first."""
    if not q.search_query.strip() or allowed == ():  # an allowlist of nothing recalls nothing
        return []
    search = MessageSearch(
        q.workspace_id,
        q.search_query,
        vector,
        session_ids=allowed or (),
        perspective_id=q.reader_id,
        as_of=q.as_of,
        limit=relevant_candidates(room),
        zone=q.zone,
        narrow=auth.narrow_view(q.workspace_id) is not None,  # ranked without the workspace's statistics
    )
    hits = _one_per_turn(q, await search_messages(conn, search))
    return [
        Relevant(
            r["message_id"],
            r["peer_id"],
            r["session_id"],
            r["content"],
            in_zone(r["created_at"], q.zone),  # headed by the asker's day and time
            r["score"],
            r["author_name"] or "",
            r["origin_message_id"] or "",
        )
        for r in hits
    ]


def _one_per_turn(q: ContextQuery, hits: list) -> list:
    """`hits` with a turn and its CloneSession copies counted once, at the best one's place: the copy in the
    session read if there is one (the recent window then does not repeat it), else the best. Each hit says
    where it was first sent (`origin_message_id`, the search's own column)."""
    kept: dict[str, dict] = {}
    for h in hits:  # best first
        first = h["origin_message_id"] or h["message_id"]
        if first not in kept or (h["session_id"] == q.session_id != kept[first]["session_id"]):
            kept[first] = h
    return list(kept.values())


async def _card_on(ctx: ApiDeps, conn: AsyncConnection, q: ContextQuery) -> bool:
    """Whether the peer card is on for the session read, as the configuration levels stood at `as_of`."""
    levels = await configurations.levels(conn, q.workspace_id, q.session_id, q.as_of)
    return resolve(ctx.configuration, *levels)["peer_card"]


async def get_context(ctx: ApiDeps, q: ContextQuery, token: str) -> Packed:
    await preflight(ctx, token)
    q = _check(q)
    observer, target = q.observer_id, q.target_id or q.observer_id
    ranked, card = [], []
    # one snapshot for every statement (ApiDeps.snapshot): the pieces must agree with each other
    async with ctx.snapshot() as conn, ctx.embedding(await search_text(conn, q.workspace_id, q.search_query)) as vector:
        await _check_scope(conn, q, observer, target, [q.session_id])
        allowed = await recall_sessions(conn, q.workspace_id, q.scope_id, q.session_ids, q.as_of)
        # a card is not tied to sessions: under an allowlist or a scope it could tell what those exclude
        if observer and allowed is None and await _card_on(ctx, conn, q):
            row = await peer_reads.peer_card(conn, q.workspace_id, observer, target, q.as_of)
            card = list(row["entries"]) if row else []
        summaries = await session_reads.latest_summaries(conn, q.workspace_id, q.session_id, q.as_of, q.reader_id)
        query_vector = await vector
        if observer:
            ranked = await _ranked(conn, q, observer, target, query_vector, allowed)
        short, long = (summaries[k]["content"] if k in summaries else "" for k in ("short", "long"))
        budget = q.token_budget or MAX_BUDGET
        fixed = await _packing(fit_fixed, budget, ranked, card, short, long, count_tokens, q.include_summary)
        relevant = await _relevant(conn, q, query_vector, allowed, fixed.relevant_room)
        return await _with_recent(conn, q, fixed, relevant)


async def _packing(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` on the packing threads (_PACKERS): one hop a step, never one a line."""
    return await asyncio.get_running_loop().run_in_executor(_PACKERS, fn, *args)


async def _with_recent(conn: AsyncConnection, q: ContextQuery, fixed: Fixed, relevant: list[Relevant]) -> Packed:
    """Pack the session's newest messages after the rest: the reader's perspective applies (only the
    turns sent while it was a member and, as of a time, there then: message_reads.as_of_bound). Read as
    many as the room could hold (TOKENS_PER_RECENT_LINE); when every one read fits and the session has
    more, read older ones, four times as many at each step, up to what the room could hold."""
    most = max(MAX_MESSAGES_SCANNED, fixed.room // FEWEST_TOKENS_PER_LINE + 1)
    limit = min(most, MAX_FIRST_READ, max(MIN_RECENT_READ, fixed.room // TOKENS_PER_RECENT_LINE + 1))
    lines: list[RecentMessage] = []  # newest first
    costs: dict[str, int] = {}  # each turn's line counted once, however many rounds pack it

    def line_cost(line: RecentMessage) -> int:
        if line.message_id not in costs:
            costs[line.message_id] = count_tokens(render_line(line))
        return costs[line.message_id]

    fitted = await _packing(fit_relevant, fixed, relevant, count_tokens)  # whatever the rounds read: once
    older_than = None
    while True:
        wanted = limit - len(lines)
        read = await message_reads.list_messages(
            conn,
            q.workspace_id,
            q.session_id,
            older_than,
            wanted,
            True,
            perspective_id=q.reader_id,
            as_of=q.as_of,
            turns=True,
        )
        lines += map(_recent_line, read)  # a round builds only the lines it read
        if read:
            older_than = read[-1]["seq"]  # newest first: the last row read is the oldest
        packed = await _packing(pack_recent, fixed, fitted, lines, line_cost)
        # none of the newest MAX_FIRST_READ fitting, the window would start further back than a reader follows;
        # reading on, a session of 25,000-character turns was read and counted to its 2,000th (14 s of CPU)
        given_up = not packed.messages and len(lines) >= MAX_FIRST_READ
        if given_up or not _window_open(packed, lines) or len(read) < wanted or limit >= most:
            return packed
        limit = min(most, limit * 4)


def _recent_line(row) -> RecentMessage:
    return RecentMessage(
        row["message_id"], row["peer_id"], row["content"], row["author_name"] or "", row["origin_message_id"] or ""
    )


def _window_open(packed: Packed, newest_first: list[RecentMessage]) -> bool:
    """Whether every turn read fit, so older ones might too: newest turns too long for the room, skipped
    before the window starts (pack_recent), do not close it."""
    shown = {r.turn for r in packed.relevant}
    candidates = [line.message_id for line in newest_first if line.turn not in shown]
    newest_packed = packed.messages[-1].message_id if packed.messages else None  # packed oldest first
    skipped = candidates.index(newest_packed) if newest_packed is not None else len(candidates)
    return skipped + len(packed.messages) == len(candidates)


async def get_representation(ctx: ApiDeps, q: ContextQuery, token: str) -> tuple[list[Obs], bool]:
    """The working representation of (observer, target), in time order; whether the lowest-ranked were
    left out for the reply's size."""
    await preflight(ctx, token)
    q = _check(q)
    if not q.observer_id:
        raise InvalidArgument("observer_id is required: whose knowledge to read")
    target = q.target_id or q.observer_id
    async with ctx.snapshot() as conn, ctx.embedding(await search_text(conn, q.workspace_id, q.search_query)) as vector:
        await _check_scope(conn, q, q.observer_id, target, [])
        allowed = await recall_sessions(conn, q.workspace_id, q.scope_id, q.session_ids, q.as_of)
        ranked = await _ranked(conn, q, q.observer_id, target, await vector, allowed)
    kept = fitting(ranked, v.MAX_PAGE_BYTES // 2)  # each is in the reply twice: itself, and in the markdown
    return sorted(kept, key=lambda o: o.created_key), len(kept) < len(ranked)
