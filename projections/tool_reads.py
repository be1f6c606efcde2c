"""The projection reads of Chat's and the dream specialists' tool loops: SQL behind their narrow ports
(services/toolloop/memory.py MemoryReads, services/dialectic/ports.py ChatReads, services/dreamer/ports.py
DreamReads). Each method reads through its own short connection, so none is held across a model call."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import RowMapping, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from projections import dialectic_reads as reads
from projections import message_reads, observation_reads, peer_reads
from projections.audit_reads import observations_by_id, unsuperseded_with_content
from projections.derivations import current_derivation
from projections.message_search import search_messages, search_text
from projections.outages import DATABASE_AWAY
from projections.schema import perceptions
from projections.search_shape import MessageSearch
from services.dialectic.ports import Evidence
from services.events.text import normalise
from services.toolloop.memory import DERIVED_LEVELS, RecallScope


def _pair(
    scope: RecallScope, levels: Sequence[str] = (), include_superseded: bool = False
) -> observation_reads.ObservationFilter:
    return observation_reads.ObservationFilter(
        scope.workspace_id,
        scope.observer_id,
        scope.target_id,
        tuple(levels),
        include_superseded=include_superseded,
        as_of=scope.as_of,
        allowed_sessions=scope.sessions,
    )


class SqlMemoryReads:
    """MemoryReads over the projections."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def nearest_observations(
        self, scope: RecallScope, levels: Sequence[str], vector: Sequence[float], limit: int
    ) -> Sequence[RowMapping]:
        async with self.engine.connect() as conn:
            return await observation_reads.nearest_observations(conn, _pair(scope, levels), vector, limit, None)

    async def search_text(self, workspace_id: str, query: str) -> str:
        async with self.engine.connect() as conn:
            return await search_text(conn, workspace_id, query)

    async def search_messages(
        self,
        scope: RecallScope,
        query: str,
        vector: Sequence[float],
        limit: int,
        *,
        session_ids: tuple[str, ...] | None,
        before: datetime | None,
        author_ids: Sequence[str] = (),
        after: datetime | None = None,
    ) -> list[RowMapping]:
        search = MessageSearch(
            scope.workspace_id,
            query,
            vector,
            perspective_id=scope.reader_id,
            limit=limit,
            session_ids=session_ids,
            author_ids=author_ids,
            after=after,
            before=before,
            as_of=scope.as_of,
            zone=scope.zone,
            narrow=scope.narrow,
        )
        async with self.engine.connect() as conn:
            return await search_messages(conn, search)

    async def grep_messages(
        self, scope: RecallScope, pattern: str, limit: int, before: datetime | None
    ) -> Sequence[RowMapping]:
        async with self.engine.connect() as conn:
            return await reads.grep_messages(
                conn, scope.workspace_id, scope.reader_id, pattern, limit, before, scope.sessions, scope.as_of
            )

    async def messages_between(
        self, scope: RecallScope, after: datetime | None, before: datetime | None, limit: int
    ) -> Sequence[RowMapping]:
        async with self.engine.connect() as conn:
            return await reads.messages_between(
                conn, scope.workspace_id, scope.reader_id, after, before, limit, scope.sessions, scope.as_of
            )

    async def observation_sources(self, scope: RecallScope, observation_id: str) -> list[tuple[RowMapping, str]] | None:
        ws = scope.workspace_id
        async with self.engine.connect() as conn:
            if not await reads.pair_observations(conn, _pair(scope, include_superseded=True), [observation_id]):
                return None
            sources = (await observation_reads.sources_of(conn, ws, [observation_id], scope.as_of))[observation_id]
            ids = [r["message_id"] for r in sources]
            visible = await message_reads.seen_by(conn, ws, scope.reader_id, ids)
            by_id = await message_reads.messages_by_id(conn, ws, [i for i in ids if i in visible])
        return [(by_id[s["message_id"]], s["span"]) for s in sources if s["message_id"] in by_id]

    async def reasoning_chain(
        self,
        scope: RecallScope,
        observation_id: str,
    ) -> tuple[RowMapping, list[RowMapping], list[RowMapping]] | None:
        ws, pair = scope.workspace_id, _pair(scope, include_superseded=True)
        async with self.engine.connect() as conn:
            found = await reads.pair_observations(conn, pair, [observation_id])
            if not found:
                return None
            premise_ids = (await observation_reads.premises_of(conn, ws, [observation_id]))[observation_id]
            premises = await reads.pair_observations(conn, pair, premise_ids)
            concluded = await reads.concluded_from(conn, ws, observation_id)
            conclusions = await reads.pair_observations(conn, pair, concluded)
        return found[0], premises, conclusions


class SqlChatReads(SqlMemoryReads):
    """ChatReads over the projections."""

    async def evidence(self, scope: RecallScope, vector: Sequence[float], per_kind: int, history: int) -> Evidence:
        s = scope
        async with self.engine.connect() as conn:
            explicit = await observation_reads.nearest_observations(
                conn, _pair(s, ["explicit"]), vector, per_kind, None
            )
            derived = await observation_reads.nearest_observations(
                conn, _pair(s, DERIVED_LEVELS), vector, per_kind, None
            )
            # the session's newest turns the observer saw: GetContext's recent messages, same rule
            recent = (
                await message_reads.list_messages(
                    conn,
                    s.workspace_id,
                    s.session_id,
                    None,
                    history,
                    True,
                    perspective_id=s.reader_id,
                    as_of=s.as_of,
                )
                if s.session_id
                else []
            )
            found = bool(explicit or derived or recent) or await reads.has_evidence(
                conn, s.workspace_id, s.observer_id, s.target_id, s.as_of, s.sessions, s.reader_id
            )
            names = await peer_reads.display_names(conn, s.workspace_id, [s.observer_id, s.target_id])
        return Evidence(list(explicit), list(derived), list(recent), found, names)


# a dream's message search asks for this many times the rows it shows, as it drops those its observer did not
# perceive after the search (which has no such condition): a few among the best then leave room for others
PERCEIVED_SLACK = 4


async def _perceived(conn: AsyncConnection, scope: RecallScope, rows: Sequence[RowMapping]) -> set[str]:
    """The ids of the given messages that the observer perceived (a MessagePerceived of (observer, author) for
    each): the target's turns and the other speakers' turns the observer took in (a question put to the target),
    never a message sent with reasoning off, which nobody perceives."""
    if not rows:
        return set()
    p = perceptions.c
    stmt = select(p.message_id).where(
        p.workspace_id == scope.workspace_id,
        p.observer_id == scope.observer_id,
        tuple_(p.observed_id, p.message_id).in_([(r["peer_id"], r["message_id"]) for r in rows]),
    )
    return set((await conn.scalars(stmt)).all())


class SqlDreamReads(SqlMemoryReads):
    """DreamReads over the projections. Its message reads show only what the observer perceived: a dream
    reasons over what the deriver was given, never over a message sent with reasoning off ("never perceived")."""

    unavailable = DATABASE_AWAY

    async def search_messages(
        self, scope: RecallScope, query: str, vector: Sequence[float], limit: int, **filters: Any
    ) -> list[RowMapping]:
        rows = await super().search_messages(scope, query, vector, limit * PERCEIVED_SLACK, **filters)
        async with self.engine.connect() as conn:
            seen = await _perceived(conn, scope, rows)
        return [r for r in rows if r["message_id"] in seen][:limit]

    async def observation_sources(self, scope: RecallScope, observation_id: str) -> list[tuple[RowMapping, str]] | None:
        # a client's observation may cite any message; the deriver's cite only what the observer perceived
        sources = await super().observation_sources(scope, observation_id)
        if not sources:
            return sources
        async with self.engine.connect() as conn:
            seen = await _perceived(conn, scope, [row for row, _ in sources])
        return [(row, span) for row, span in sources if row["message_id"] in seen]

    async def current_derivation(self, workspace_id: str, observer_id: str, observed_id: str) -> str:
        async with self.engine.connect() as conn:
            return await current_derivation(
                conn, workspace_id=workspace_id, observer_id=observer_id, observed_id=observed_id
            )

    async def newest_observations(self, scope: RecallScope, levels: Sequence[str], limit: int) -> Sequence[RowMapping]:
        async with self.engine.connect() as conn:
            return await observation_reads.list_observations(conn, _pair(scope, levels), None, limit, reverse=True)

    async def opening(self, scope: RecallScope, limit: int) -> tuple[Sequence[RowMapping], list[str]]:
        async with self.engine.connect() as conn:
            rows = await observation_reads.list_observations(conn, _pair(scope), None, limit, reverse=True)
            card = await peer_reads.peer_card(conn, scope.workspace_id, scope.observer_id, scope.target_id)
        return rows, list(card["entries"]) if card else []

    async def named_observations(
        self, scope: RecallScope, derivation: str, ids: Sequence[str], content: str = ""
    ) -> dict[str, dict]:
        s = scope
        async with self.engine.connect() as conn:
            rows = await observations_by_id(conn, s.workspace_id, list(ids))
            if content:
                rows = {
                    **await unsuperseded_with_content(
                        conn, s.workspace_id, s.observer_id, s.target_id, derivation, normalise(content)
                    ),
                    **rows,
                }
            premises = await observation_reads.premises_of(conn, s.workspace_id, list(rows))
        return {i: {**r, "premise_ids": premises[i]} for i, r in rows.items()}
