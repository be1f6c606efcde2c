"""Message search: a workspace's messages ranked for a query, with scoping and time filters.

Full-text only here (websearch_to_tsquery over messages.content_tsv; `score` = ts_rank); replaced by the
hybrid RRF version (vector + full text) on merge with the `search` branch, which keeps this interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Float, RowMapping, cast, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.queries import MESSAGE_COLUMNS, visible_to
from projections.schema import messages


@dataclass(frozen=True)
class MessageSearch:
    workspace_id: str
    query: str
    vector: Sequence[float] | None  # unused by the full-text version
    session_ids: Sequence[str] = ()
    author_ids: Sequence[str] = ()
    perspective_id: str = ""  # only messages this peer could have seen
    after: datetime | None = None
    before: datetime | None = None
    limit: int = 10


async def search_messages(conn: AsyncConnection, search: MessageSearch) -> list[RowMapping]:
    """Message rows matching the query, each with a float `score`, best first."""
    m = messages.c
    query = func.websearch_to_tsquery("english", search.query)
    score = cast(func.ts_rank(m.content_tsv, query), Float).label("score")
    stmt = select(*MESSAGE_COLUMNS, score).where(m.workspace_id == search.workspace_id, m.content_tsv.op("@@")(query))
    if search.session_ids:
        stmt = stmt.where(m.session_id.in_(list(search.session_ids)))
    if search.author_ids:
        stmt = stmt.where(m.peer_id.in_(list(search.author_ids)))
    if search.perspective_id:
        stmt = stmt.where(visible_to(search.workspace_id, search.perspective_id))
    if search.after is not None:
        stmt = stmt.where(m.created_at > search.after)
    if search.before is not None:
        stmt = stmt.where(m.created_at < search.before)
    stmt = stmt.order_by(score.desc(), m.created_at.desc(), m.message_id).limit(search.limit)
    return list((await conn.execute(stmt)).mappings().all())
