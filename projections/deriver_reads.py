"""The deriver's reads (services/deriver/ports.py): existing observations that a new fact may duplicate.

Raw SQL against the serving schema, read in a short connection after the model call, never across it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

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
NEAREST = 4  # rows per fact for the judge: the nearest may say another thing in its words (judge._nested)
# a deletion through the API (DeleteObservation: someone said the fact is wrong) is one no re-derivation may
# undo; a dream's removal is its own derivation's reasoning. The API's producer (services/api/deps.py)
_API_COMPONENT = "api"
_PAIR_EXPLICIT = "o.workspace_id = :w AND o.observer_id = :o AND o.observed_id = :d AND o.level = 'explicit'"


@dataclass(frozen=True)
class CitedFact:
    """An explicit observation as a re-derivation compares it with the ones the API deleted: what it says
    (normalised), the messages it cites, its vector; for a deleted one, the reason given."""

    observation_id: str
    normalised: str
    message_ids: frozenset[str]
    embedding: tuple[float, ...]
    embedding_model: str
    delete_reason: str = ""


def _vector(values: Sequence[float]) -> str:
    return "[" + ",".join(f"{v:.7g}" for v in values) + "]"


def _floats(text_vector: str | None) -> tuple[float, ...]:
    return tuple(float(x) for x in text_vector.strip("[]").split(",")) if text_vector else ()


def _known(row) -> KnownObservation:
    client = row.derivation == PAIR_WIDE
    return KnownObservation(
        row.observation_id, Level(row.level), row.content_key, row.session_id, _floats(row.embedding), client
    )


def _cited(row) -> CitedFact:
    return CitedFact(
        row.observation_id,
        row.content_key,
        frozenset(row.message_ids),
        _floats(row.embedding),
        row.embedding_model,
        row.delete_reason or "",
    )


class ObservationStore:
    """The deriver's DuplicateCandidates over the serving schema."""

    def __init__(
        self, engine: AsyncEngine, schema: str, embedding_model: str, settings: DeriverSettings | None = None
    ) -> None:
        self.engine = engine
        self.table = f'"{schema}".observations'
        self.sources, self.history = f'"{schema}".observation_sources', f'"{schema}".observation_events'
        self.embedding_model = embedding_model  # near duplicates are looked for among its vectors only
        self.settings = settings or DeriverSettings()

    @classmethod
    def connect(cls, settings, pool_size: int) -> ObservationStore:
        """A store on its own engine over the serving schema of `settings` (the whole peerlog settings)."""
        return cls(
            create_async_engine(settings.database.url, pool_size=pool_size, **settings.database.engine_args()),
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
        self, pair: Pair, keys: Sequence[str], embeddings: Sequence[Sequence[float]], sessions: Sequence[str]
    ) -> list[KnownObservation]:
        """Live explicit observations of the pair's derivation (dedup stays within it) and of clients with one of `keys`,
        or nearest to one of `embeddings` among those a fact from `sessions[i]` may match."""
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
        for i, (emb, session) in enumerate(zip(embeddings, sessions, strict=True)):
            # only those the judge may match: its session's, and clients' written for no session. Over the
            # whole pair, another session's copy of the fact came nearest and hid this session's
            queries.append(
                f"(SELECT {cols} FROM pair WHERE session_id = :s{i} OR (derivation = :pair_wide AND session_id IS NULL) "
                f"ORDER BY embedding <=> CAST(:e{i} AS vector) LIMIT {NEAREST})"
            )
            params[f"e{i}"], params[f"s{i}"] = _vector(emb), session
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

    async def _cited_rows(self, pair: Pair, where: str, params: dict) -> list[CitedFact]:
        """The pair's explicit observations that match `where`, with the messages they cite."""
        sql = (
            "SELECT o.observation_id, o.content_key, o.embedding::text AS embedding, o.embedding_model, "
            f"o.delete_reason, ARRAY(SELECT s.message_id FROM {self.sources} s WHERE s.workspace_id = o.workspace_id "
            f"AND s.observation_id = o.observation_id) AS message_ids FROM {self.table} o "
            f"WHERE {_PAIR_EXPLICIT} AND {where}"
        )
        params = {**params, "w": pair.workspace_id, "o": pair.observer_id, "d": pair.observed_id}
        try:
            rows = await self._read(sql, params)
        except ProgrammingError:  # no projection yet: nothing was deleted, nothing is live
            return []
        return [_cited(r) for r in rows]

    async def deleted_by_api(self, pair: Pair) -> list[CitedFact]:
        """The pair's explicit observations, in every derivation, that were deleted through the API."""
        deleted = (
            f"o.deleted_at IS NOT NULL AND EXISTS (SELECT 1 FROM {self.history} h WHERE h.workspace_id = o.workspace_id "
            "AND h.observation_id = o.observation_id AND h.kind = 'deleted' AND h.producer->>'component' = :api)"
        )
        return await self._cited_rows(pair, deleted, {"api": _API_COMPONENT})

    async def live_citing(self, pair: Pair, message_ids: Sequence[str]) -> list[CitedFact]:
        """Live explicit observations of the pair's derivation (not what clients wrote) citing one of `message_ids`."""
        citing = (
            "o.derivation = :v AND o.superseded_by IS NULL AND o.deleted_at IS NULL AND EXISTS (SELECT 1 FROM "
            f"{self.sources} s WHERE s.workspace_id = o.workspace_id AND s.observation_id = o.observation_id "
            "AND s.message_id = ANY(:ids))"
        )
        return await self._cited_rows(pair, citing, {"v": pair.derivation, "ids": list(message_ids)})
