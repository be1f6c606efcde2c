"""What the deriver reads from the projections: existing observations that a new fact may duplicate.

Raw SQL against the serving schema, so the processor does not depend on the projection code (which
sits above it). Read in a short connection after the model call, never across it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.ext.asyncio import AsyncEngine

from services.deriver.judge import Known, Pair
from services.events import Level

log = logging.getLogger(__name__)

_LIVE = ("superseded_by IS NULL AND deleted_at IS NULL AND workspace_id = :w AND observer_id = :o "
         "AND observed_id = :d AND derivation = :v")
_PAIR_COLS = "observation_id, level, content_key, session_id, embedding"


def _vector(values: Sequence[float]) -> str:
    return "[" + ",".join(f"{v:.7g}" for v in values) + "]"


def _known(row) -> Known:
    emb = tuple(float(x) for x in row.embedding.strip("[]").split(",")) if row.embedding else ()
    return Known(row.observation_id, Level(row.level), row.content_key, row.session_id, emb)


class ObservationStore:
    def __init__(self, engine: AsyncEngine, schema: str, embedding_model: str) -> None:
        self.engine = engine
        self.table = f'"{schema}".observations'
        self.embedding_model = embedding_model  # near duplicates are looked for among its vectors only

    async def candidates(self, pair: Pair, keys: Sequence[str], embeddings: Sequence[Sequence[float]]) -> list[Known]:
        """Live explicit observations of the pair's derivation (dedup stays within it) with one of `keys`,
        or nearest to one of `embeddings`."""
        cols = "observation_id, level, content_key, session_id, embedding::text AS embedding"
        params = {"w": pair.workspace_id, "o": pair.observer_id, "d": pair.observed_id, "v": pair.derivation,
                  "model": self.embedding_model}
        # the index is on md5(content_key) (a long key is over a btree entry's size): the md5s find the
        # rows, the keys themselves decide; Postgres hashes the keys, in the database's encoding
        queries = [f"SELECT {cols} FROM {self.table} WHERE {_LIVE} AND level = 'explicit' "
                   "AND md5(content_key) = ANY(ARRAY(SELECT md5(k) FROM unnest(CAST(:keys AS text[])) AS k)) "
                   "AND content_key = ANY(:keys)"]
        params["keys"] = list(keys)
        for i, emb in enumerate(embeddings):
            queries.append(f"(SELECT {cols} FROM pair ORDER BY embedding <=> CAST(:e{i} AS vector) LIMIT 1)")
            params[f"e{i}"] = _vector(emb)
        # exact over the pair's rows: ordering the whole table by distance lets the planner walk the HNSW index
        # (ef_search candidates from the whole workspace) and filter afterwards, which misses the pair's
        # duplicate when other rows are nearer; a materialised CTE of the pair's rows cannot use that index
        within = (f"WITH pair AS MATERIALIZED (SELECT {_PAIR_COLS} FROM {self.table} "
                  f"WHERE {_LIVE} AND level = 'explicit' AND embedding_model = :model) ") if embeddings else ""
        try:
            async with self.engine.connect() as conn:
                rows = (await conn.execute(text(within + " UNION ".join(queries)), params)).all()
        except ProgrammingError as exc:
            log.warning("no projection to de-duplicate against yet (%s); relying on recent state", exc.orig)
            return []
        return [_known(r) for r in rows]
