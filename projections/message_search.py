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
from functools import lru_cache

from pgvector.sqlalchemy import Vector
from sqlalchemy import RowMapping, Text, and_, bindparam, func, literal, literal_column, select, union_all
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
    """Reciprocal rank fusion: score = Σ 1/(k + rank), rank 1-based; best first, ties by id.

    The definition; search_messages computes the same in SQL (`fused`: one round trip instead of three
    on the API's hot path), and an integration test holds the two equal.
    """
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def depth(limit: int) -> int:
    """Candidates taken from each list."""
    return max(limit * 4, MIN_DEPTH)


@dataclass(frozen=True)
class Shape:
    """Which parts a search has. Statements are built once per shape (building one costs more CPU than
    running it) and take every value as a bound parameter."""

    vector: bool
    text: bool
    sessions: bool = False
    authors: bool = False
    after: bool = False
    before: bool = False
    perspective: bool = False

    @classmethod
    def of(cls, s: MessageSearch) -> Shape:
        return cls(vector=s.vector is not None, text=bool(s.query.strip()), sessions=bool(s.session_ids),
                   authors=bool(s.author_ids), after=s.after is not None, before=s.before is not None,
                   perspective=bool(s.perspective_id))


def params(s: MessageSearch) -> dict:
    """The bound values of `s`'s statement."""
    return {"workspace_id": s.workspace_id, "q": s.query, "vector": list(s.vector) if s.vector is not None else None,
            "session_ids": list(s.session_ids), "author_ids": list(s.author_ids), "after": s.after,
            "before": s.before, "perspective_id": s.perspective_id, "n": depth(s.limit), "limit": s.limit}


def _filters(shape: Shape) -> list:
    m, ms = messages.c, memberships.c
    where = [m.workspace_id == bindparam("workspace_id")]
    if shape.sessions:
        where.append(m.session_id.in_(bindparam("session_ids", expanding=True)))
    if shape.authors:
        where.append(m.peer_id.in_(bindparam("author_ids", expanding=True)))
    if shape.after:
        where.append(m.created_at >= bindparam("after"))
    if shape.before:
        where.append(m.created_at < bindparam("before"))
    if shape.perspective:
        # the rule of queries.seen_by: sent (recorded) while the peer was a member of the session
        where.append(select(literal(1)).where(
            ms.workspace_id == m.workspace_id, ms.session_id == m.session_id,
            ms.peer_id == bindparam("perspective_id"),
            ms.joined_at <= m.recorded_at, ms.left_at.is_(None) | (ms.left_at >= m.recorded_at),
        ).exists())
    return where


@lru_cache(maxsize=256)
def semantic(shape: Shape):
    """(message_id, r): the n nearest messages by cosine distance, r = 1-based rank."""
    distance = messages.c.embedding.cosine_distance(bindparam("vector", type_=Vector()))
    near = (select(messages.c.message_id, distance.label("d"))
            .where(*_filters(shape), messages.c.embedding.is_not(None))
            .order_by(distance).limit(bindparam("n")).cte("near").prefix_with("MATERIALIZED", dialect="postgresql"))
    # relaxed_order may hand candidates over slightly out of order: rank by the exact distance
    rank = func.row_number().over(order_by=(near.c.d, near.c.message_id))
    return select(near.c.message_id, rank.label("r"))


@lru_cache(maxsize=256)
def lexical(shape: Shape):
    """(message_id, r): the n best full-text matches by ts_rank_cd, r = 1-based rank."""
    query = func.websearch_to_tsquery(literal_column("'english'::regconfig"), bindparam("q", type_=Text))
    score = func.ts_rank_cd(messages.c.content_tsv, query)
    hits = (select(messages.c.message_id, score.label("s"))
            .where(*_filters(shape), messages.c.content_tsv.op("@@")(query))
            .order_by(score.desc(), messages.c.message_id).limit(bindparam("n")).subquery("hits"))
    rank = func.row_number().over(order_by=(hits.c.s.desc(), hits.c.message_id))
    return select(hits.c.message_id, rank.label("r"))


@lru_cache(maxsize=256)
def fused(shape: Shape):
    """The whole search as one statement: both rankings, RRF as in `fuse`, then the rows."""
    lists = ([semantic(shape)] if shape.vector else []) + ([lexical(shape)] if shape.text else [])
    ranks = union_all(*lists).subquery("ranks") if len(lists) > 1 else lists[0].subquery("ranks")
    # .op("/"): SQLAlchemy's `/` would cast the divisor to NUMERIC; float8 / bigint stays float8
    score = func.sum(literal_column("1.0::float8").op("/")((ranks.c.r + RRF_K).self_group())).label("score")
    best = (select(ranks.c.message_id, score).group_by(ranks.c.message_id)
            .order_by(score.desc(), ranks.c.message_id).limit(bindparam("limit")).subquery("best"))
    m = messages.c
    return (select(*(m[c] for c in MESSAGE_COLUMNS), best.c.score)
            .join_from(best, messages, and_(m.workspace_id == bindparam("workspace_id"),
                                            m.message_id == best.c.message_id))
            .order_by(best.c.score.desc(), best.c.message_id))


async def search_messages(conn: AsyncConnection, search: MessageSearch) -> list[RowMapping]:
    """Message rows matching `search`, best first, each with its fused `score` (see module docstring)."""
    if search.vector is None and not search.query.strip():
        return []
    values = params(search)
    if search.vector is not None:
        # ef_search bounds the candidates one graph walk yields. Plain SET: readers' connections are in
        # autocommit, where SET LOCAL does nothing; every HNSW search sets both first, so a pooled
        # connection's earlier values are never the ones used
        await conn.exec_driver_sql("SET hnsw.iterative_scan = relaxed_order; "
                                   f"SET hnsw.ef_search = {max(values['n'], 40):d}")
    return list((await conn.execute(fused(Shape.of(search)), values)).mappings().all())
