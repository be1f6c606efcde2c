"""The deriver's reads (services/deriver/ports.py): existing observations that a new fact may duplicate.

Raw SQL against the serving schema, read in a short connection after the model call, never across it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.exc import InterfaceError, OperationalError, ProgrammingError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from services.deriver.judge import KnownObservation
from services.deriver.ports import StoreUnavailable
from services.deriver.settings import DeriverSettings
from services.events import PAIR_WIDE, Level
from services.events.pairs import Pair

log = logging.getLogger(__name__)
# the database, not the query: a refused or dropped connection, an exhausted pool
_TRANSIENT = (OperationalError, InterfaceError, PoolTimeout)

# the pair's derivation and what clients wrote, which is in every derivation (PAIR_WIDE)
_LIVE = (
    "superseded_by IS NULL AND deleted_at IS NULL AND workspace_id = :w AND observer_id = :o "
    "AND observed_id = :d AND derivation IN (:v, :pair_wide)"
)
_PAIR_COLS = "observation_id, level, content_key, session_id, embedding, derivation"


def _vector(values: Sequence[float]) -> str:
    return "[" + ",".join(f"{v:.7g}" for v in values) + "]"


def _known(row) -> KnownObservation:
    emb = tuple(float(x) for x in row.embedding.strip("[]").split(",")) if row.embedding else ()
    client = row.derivation == PAIR_WIDE
    return KnownObservation(row.observation_id, Level(row.level), row.content_key, row.session_id, emb, client)


class ObservationStore:
    """The deriver's DuplicateCandidates over the serving schema."""

    def __init__(
        self, engine: AsyncEngine, schema: str, embedding_model: str, settings: DeriverSettings | None = None
    ) -> None:
        self.engine = engine
        self.table = f'"{schema}".observations'
        self.embedding_model = embedding_model  # near duplicates are looked for among its vectors only
        self.settings = settings or DeriverSettings()

    @classmethod
    def connect(cls, settings, pool_size: int) -> ObservationStore:
        """A store on its own engine over the serving schema of `settings` (the whole peerlog settings)."""
        return cls(
            create_async_engine(
                settings.database.url, pool_size=pool_size, connect_args=settings.database.connect_args()
            ),
            settings.database.schema_name,
            settings.embedding.model,
            settings.deriver,
        )

    async def close(self) -> None:
        await self.engine.dispose()

    async def _read(self, sql: str, params: dict) -> list:
        """The rows of one query, retried with backoff while the database is unreachable."""
        s, attempts = self.settings, 0
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(s.store_retries + 1),
                retry=retry_if_exception_type(_TRANSIENT),
                wait=wait_exponential_jitter(initial=s.store_backoff_s, max=s.store_max_backoff_s),
                reraise=True,
            ):
                with attempt:
                    attempts += 1
                    async with self.engine.connect() as conn:
                        return (await conn.execute(text(sql), params)).all()
        except _TRANSIENT as exc:
            raise StoreUnavailable(attempts, getattr(exc, "orig", None) or exc) from exc
        raise AssertionError("unreachable: the retry loop returns or raises")

    async def retired(self, pair: Pair, observation_ids: Sequence[str]) -> set[str]:
        sql = (
            f"SELECT observation_id FROM {self.table} WHERE workspace_id = :w AND observation_id = ANY(:ids) "
            "AND (superseded_by IS NOT NULL OR deleted_at IS NOT NULL)"
        )
        try:
            rows = await self._read(sql, {"w": pair.workspace_id, "ids": list(observation_ids)})
        except ProgrammingError:  # no projection yet: nothing is retired
            return set()
        return {r.observation_id for r in rows}

    async def candidates(
        self, pair: Pair, keys: Sequence[str], embeddings: Sequence[Sequence[float]]
    ) -> list[KnownObservation]:
        """Live explicit observations of the pair's derivation (dedup stays within it) and of clients with one of `keys`,
        or nearest to one of `embeddings`."""
        cols = "observation_id, level, content_key, session_id, embedding::text AS embedding, derivation"
        params = {
            "w": pair.workspace_id,
            "o": pair.observer_id,
            "d": pair.observed_id,
            "v": pair.derivation,
            "pair_wide": PAIR_WIDE,
            "model": self.embedding_model,
        }
        # the index is on md5(content_key) (a long key is over a btree entry's size): the md5s find the
        # rows, the keys themselves decide; Postgres hashes the keys, in the database's encoding
        queries = [
            f"SELECT {cols} FROM {self.table} WHERE {_LIVE} AND level = 'explicit' "
            "AND md5(content_key) = ANY(ARRAY(SELECT md5(k) FROM unnest(CAST(:keys AS text[])) AS k)) "
            "AND content_key = ANY(:keys)"
        ]
        params["keys"] = list(keys)
        for i, emb in enumerate(embeddings):
            queries.append(f"(SELECT {cols} FROM pair ORDER BY embedding <=> CAST(:e{i} AS vector) LIMIT 1)")
            params[f"e{i}"] = _vector(emb)
        # exact over the pair's rows: ordering the whole table by distance lets the planner walk the HNSW index
        # (ef_search candidates from the whole workspace) and filter afterwards, which misses the pair's
        # duplicate when other rows are nearer; a materialised CTE of the pair's rows cannot use that index
        within = (
            (
                f"WITH pair AS MATERIALIZED (SELECT {_PAIR_COLS} FROM {self.table} "
                f"WHERE {_LIVE} AND level = 'explicit' AND embedding_model = :model) "
            )
            if embeddings
            else ""
        )
        try:
            rows = await self._read(within + " UNION ".join(queries), params)
        except ProgrammingError as exc:
            log.warning("no projection to de-duplicate against yet (%s); relying on recent state", exc.orig)
            return []
        return [_known(r) for r in rows]
