"""Which embedding models the projections' stored vectors came from, beside the one reads compare with.

Reads compare a query only with vectors of the active model (`PEERLOG_EMBEDDING_MODEL`), so vectors of
another model are invisible to semantic search: after the default model changed, or a setting was changed
without `peerlog reembed` and a rebuild (README, Changing the embedding model). The API says so when it
starts, and the benches refuse a kept stack of another model, instead of letting searches quietly find less.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import Select, func, select, text, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.db import mapped_schema
from projections.schema import messages, observations

VECTOR_TABLES = (messages, observations)

# the planner's statistics of the model column: each value ANALYZE's sample holds with its share of the
# rows, and the table's row count. With a few distinct values every one sampled is listed
_SAMPLED_MODELS = text(
    "SELECT s.most_common_vals::text::text[] AS models, s.most_common_freqs AS shares, c.reltuples AS rows"
    " FROM pg_stats s"
    " JOIN pg_namespace n ON n.nspname = s.schemaname"
    " JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = s.tablename"
    " WHERE s.schemaname = coalesce(CAST(:schema AS text), current_schema()) AND s.tablename = ANY(:tables) AND s.attname = 'embedding_model'"
)


def vectors_by_model() -> Select:
    """(model, count) rows: the messages and observations holding a vector, by the model that made it.
    Exact, and a scan of both tables."""
    parts = [
        select(t.c.embedding_model.label("model")).where(t.c.embedding_model.is_not(None), t.c.embedding_model != "")
        for t in VECTOR_TABLES
    ]
    both = union_all(*parts).subquery()
    return select(both.c.model, func.count()).group_by(both.c.model).order_by(both.c.model)


async def vectors_of_other_models(conn: AsyncConnection, active: str) -> dict[str, int]:
    """About how many messages and observations hold a vector of a model other than `active`, by model.

    Estimated from the planner's statistics, not counted: the API asks at every start, and counting reads
    every row of both tables (100 ms for 152,000 rows here; a store of millions would be read whole at each
    restart). The statistics are as of the tables' last ANALYZE (autovacuum's, or the rebuild's before its
    switch); a table never analysed adds nothing, and a model held by too few rows to be sampled is missed."""
    schema = mapped_schema(conn.sync_connection)
    found = await conn.execute(_SAMPLED_MODELS, {"schema": schema, "tables": [t.name for t in VECTOR_TABLES]})
    estimated: Counter[str] = Counter()
    for models, shares, rows in found:
        for model, share in zip(models or (), shares or (), strict=True):
            if model and model != active:
                estimated[model] += round(share * max(rows, 0))
    return dict(estimated)
