"""Which embedding models the projections' stored vectors came from, beside the one reads compare with.

Reads compare a query only with vectors of the active model (`PEERLOG_EMBEDDING_MODEL`), so vectors of
another model are invisible to semantic search: after the default model changed, or a setting was changed
without `peerlog reembed` and a rebuild (README, Changing the embedding model). The API says so when it
starts, instead of letting searches quietly find less.
"""

from __future__ import annotations

from sqlalchemy import func, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.schema import messages, observations


async def vectors_of_other_models(conn: AsyncConnection, active: str) -> dict[str, int]:
    """How many messages and observations hold a vector of a model other than `active`, by model."""
    parts = [
        select(t.c.embedding_model.label("model")).where(
            t.c.embedding_model.is_not(None), t.c.embedding_model != "", t.c.embedding_model != active
        )
        for t in (messages, observations)
    ]
    both = union_all(*parts).subquery()
    rows = await conn.execute(select(both.c.model, func.count()).group_by(both.c.model).order_by(both.c.model))
    return {model: n for model, n in rows}
