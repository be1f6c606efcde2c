"""SearchMessages at workspace, session and peer level: one implementation, three entry points."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.message_search import adjacent_turns, search_messages, search_text
from projections.search_shape import MessageSearch
from services.api import auth
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.guards import check_scope
from services.api.preflight import preflight
from services.api.scopes import recall_sessions
from services.errors import FailedPrecondition, InvalidArgument

DEFAULT_LIMIT, MAX_LIMIT = 10, 100


def _checked(q: MessageSearch) -> MessageSearch:
    # the ids before any read: the query's named peers are read before the scope is checked
    v.check_id("workspace_id", q.workspace_id)
    if q.perspective_id:
        v.check_id("perspective_peer_id", q.perspective_id)
    v.check_text("query", q.query, v.MAX_SEARCH_QUERY_CHARS)
    if not 0 <= q.limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit {q.limit} is outside 1–{MAX_LIMIT}; 0 means the default ({DEFAULT_LIMIT})")
    if q.after is not None and q.before is not None and q.after >= q.before:
        raise InvalidArgument(
            f"after ({q.after.isoformat()}) must be earlier than before "
            f"({q.before.isoformat()}); the range is [after, before)"
        )
    for kind, ids in (("session_id", q.session_ids), ("author_peer_id", q.author_ids)):
        v.check_id_count(f"{kind}s", ids)  # each is looked up, and a missing one named in the error
        for i in ids:
            v.check_id(kind, i)
        v.check_distinct(kind, ids)
    return q


def _check_scope(conn: AsyncConnection, q: MessageSearch):
    peers = {
        **{f"author_peer_ids[{i}]": p for i, p in enumerate(q.author_ids)},
        **({"perspective_peer_id": q.perspective_id} if q.perspective_id else {}),
    }
    return check_scope(conn, q.workspace_id, q.session_ids, **peers)


@dataclass(frozen=True)
class Found:
    """A search's hits, best first, and (when asked for) their adjacent turns by (session_id, seq)."""

    hits: Sequence[Mapping[str, Any]]
    adjacent: dict[tuple[str, int], RowMapping]


async def search(ctx: ApiDeps, q: MessageSearch, token: str, scope_id: str = "", rerank: bool = False) -> Found:
    """Messages matching the query by meaning and by words, fused by score with their neighbours, best first.

    `q` comes as the request put it: no vector yet (the query is embedded here), limit 0 = the default.
    With `scope_id`, only the scope's sessions (now), within `q.session_ids` if it lists any. With
    `rerank`, the server's cross-encoder re-orders the best candidates once the connection is closed.
    """
    q = _checked(q)
    reranker = ctx.reranker if rerank else None
    if rerank and reranker is None:
        raise FailedPrecondition(
            "this server runs without a re-ranking model (PEERLOG_RERANK_MODEL is empty): search without rerank"
        )
    await preflight(ctx, token)
    limit = q.limit or DEFAULT_LIMIT
    depth = reranker.depth(limit) if reranker else limit
    # the query is embedded while the scope is checked; a NotFound discards the vector. Hits and their
    # adjacent turns are two statements: one snapshot for both
    async with (
        ctx.snapshot() if q.include_adjacent else ctx.engine.connect() as conn,
        ctx.embedding(await search_text(conn, q.workspace_id, q.query)) as vector,
    ):
        await _check_scope(conn, q)
        allowed = await recall_sessions(conn, q.workspace_id, scope_id, q.session_ids)
        if allowed == ():  # a scope of no sessions (or none of those asked for) finds nothing
            return Found([], {})
        # a token narrower than the workspace is ranked without the workspace's statistics (MessageSearch.narrow)
        q = replace(q, session_ids=allowed or (), narrow=auth.narrow_view(q.workspace_id) is not None)
        hits = await search_messages(conn, replace(q, vector=await vector, limit=depth), metadata=True)
        adjacent = await adjacent_turns(conn, q, hits) if q.include_adjacent else {}
    if reranker:  # after the connection is closed: none is held across a model call
        hits = await reranker.rerank(q.query, hits, limit)
    return Found(hits, adjacent)
