"""Hybrid message search: pgvector cosine and Postgres full text, fused by reciprocal rank fusion.

Both candidate lists apply every filter before ranking, so a filtered search is as deep as an
unfiltered one. The vector list runs with `hnsw.iterative_scan = relaxed_order` (pgvector ≥ 0.8):
when filters drop most of what the HNSW graph walk finds, the scan continues instead of returning too
few rows; the planner still picks an exact scan over a btree-filtered set (one session, one author,
a perspective's sessions) when that is cheaper. relaxed_order may return candidates slightly out of
distance order, so they are ranked by their exact distance afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pgvector.sqlalchemy import Vector
from sqlalchemy import Float, RowMapping, Text, and_, bindparam, func, literal, literal_column, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.schema import memberships, messages

RRF_K = 60
MIN_DEPTH = 50
MESSAGE_COLUMNS = ("workspace_id", "message_id", "session_id", "seq", "peer_id", "content", "created_at", "metadata")


@dataclass(frozen=True)
class MessageSearch:
    workspace_id: str
    query: str
    vector: Sequence[float] | None
    session_ids: Sequence[str] = ()
    author_ids: Sequence[str] = ()
    perspective_id: str = ""
    after: datetime | None = None
    before: datetime | None = None
    limit: int = 10


def fuse(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: score = Σ 1/(k + rank), rank 1-based; best first, ties by id."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def depth(limit: int) -> int:
    """Candidates taken from each list."""
    return max(limit * 4, MIN_DEPTH)


def _filters(s: MessageSearch) -> list:
    m, ms = messages.c, memberships.c
    where = [m.workspace_id == s.workspace_id]
    if s.session_ids:
        where.append(m.session_id.in_(list(s.session_ids)))
    if s.author_ids:
        where.append(m.peer_id.in_(list(s.author_ids)))
    if s.after is not None:
        where.append(m.created_at >= s.after)
    if s.before is not None:
        where.append(m.created_at < s.before)
    if s.perspective_id:
        # the rule of queries.seen_by: sent (recorded) while the peer was a member of the session
        where.append(select(literal(1)).where(
            ms.workspace_id == s.workspace_id, ms.session_id == m.session_id, ms.peer_id == s.perspective_id,
            ms.joined_at <= m.recorded_at, ms.left_at.is_(None) | (ms.left_at >= m.recorded_at),
        ).exists())
    return where


def _semantic(s: MessageSearch, n: int):
    distance = messages.c.embedding.cosine_distance(bindparam("vector", list(s.vector), type_=Vector()))
    near = (select(messages.c.message_id, distance.label("d"))
            .where(*_filters(s), messages.c.embedding.is_not(None))
            .order_by(distance).limit(n).cte("near").prefix_with("MATERIALIZED", dialect="postgresql"))
    return select(near.c.message_id).order_by(near.c.d, near.c.message_id)


def _lexical(s: MessageSearch, n: int):
    query = func.websearch_to_tsquery(literal_column("'english'::regconfig"), bindparam("q", s.query, type_=Text))
    rank = func.ts_rank_cd(messages.c.content_tsv, query)
    return (select(messages.c.message_id).where(*_filters(s), messages.c.content_tsv.op("@@")(query))
            .order_by(rank.desc(), messages.c.message_id).limit(n))


async def search_messages(conn: AsyncConnection, search: MessageSearch) -> list[RowMapping]:
    """Message rows matching `search`, best first, each with its fused `score` (see module docstring)."""
    n = depth(search.limit)
    rankings = []
    if search.vector is not None:
        # local to the caller's transaction; ef_search bounds how many candidates one graph walk yields
        await conn.execute(text("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
                                "set_config('hnsw.ef_search', :ef, true)"), {"ef": str(max(n, 40))})
        rankings.append(list((await conn.scalars(_semantic(search, n))).all()))
    if search.query.strip():
        rankings.append(list((await conn.scalars(_lexical(search, n))).all()))
    best = fuse(rankings)[: search.limit]
    if not best:
        return []
    m = messages.c
    picked = (func.unnest(bindparam("ids", [i for i, _ in best], type_=ARRAY(Text)),
                          bindparam("scores", [sc for _, sc in best], type_=ARRAY(Float)))
              .table_valued("message_id", "score", with_ordinality="ord").render_derived(name="k"))
    stmt = (select(*(m[c] for c in MESSAGE_COLUMNS), picked.c.score.label("score"))
            .join_from(picked, messages, and_(m.workspace_id == search.workspace_id,
                                              m.message_id == picked.c.message_id))
            .order_by(picked.c.ord))
    return list((await conn.execute(stmt)).mappings().all())
