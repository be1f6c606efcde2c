"""Which embedding models the projections' stored vectors came from, beside the one reads compare with.

Reads compare a query only with vectors of the active model (`PEERLOG_EMBEDDING_MODEL`), so vectors of
another model are invisible to semantic search: after the default model changed, or a setting was changed
without `peerlog reembed` and a rebuild (README, Changing the embedding model). The API says so when it
starts, and the benches refuse a kept stack of another model, instead of letting searches quietly find less.
"""

from __future__ import annotations

from sqlalchemy import Select, func, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.schema import messages, observations


def vectors_by_model() -> Select:
    """(model, count) rows: the messages and observations holding a vector, by the model that made it."""
    parts = [
        select(t.c.embedding_model.label("model")).where(t.c.embedding_model.is_not(None), t.c.embedding_model != "")
        for t in (messages, observations)
    ]
    both = union_all(*parts).subquery()
    return select(both.c.model, func.count()).group_by(both.c.model).order_by(both.c.model)


async def vectors_of_other_models(conn: AsyncConnection, active: str) -> dict[str, int]:
    """How many messages and observations hold a vector of a model other than `active`, by model."""
    return {model: n for model, n in await conn.execute(vectors_by_model()) if model != active}
