"""Handlers for the pair-store events: perceptions, observations, batches, summaries, dead letters."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, update
from sqlalchemy.dialects.postgresql import insert

from projections.schema import (
    dead_letters,
    derivation_batches,
    observation_sources,
    observations,
    peer_cards,
    perceptions,
    premises,
    rejected_observations,
    summaries,
)
from services.events import (
    BatchDerived,
    DerivationDeadLettered,
    DerivationDue,
    DerivationStarted,
    MessagePerceived,
    ObservationAdded,
    ObservationDeleted,
    ObservationReinforced,
    ObservationRejected,
    ObservationSuperseded,
    PeerCardUpdated,
    SummaryDeadLettered,
    SummaryUpdated,
)
from services.events.text import normalise


def _insert_new(conn: Connection, table, rows: list[dict]) -> None:
    if rows:
        conn.execute(insert(table).on_conflict_do_nothing(), rows)


def message_perceived(conn: Connection, events: Sequence[MessagePerceived]) -> None:
    _insert_new(conn, perceptions, [
        dict(workspace_id=e.workspace_id, observer_id=e.observer_id, observed_id=e.observed_id,
             message_id=e.message_id, session_id=e.session_id, perceived_at=e.occurred_at, event_id=e.event_id)
        for e in events
    ])


def derivation_due(conn: Connection, events: Sequence[DerivationDue]) -> None:
    """Clock ticks change no projection."""


def _sources(events) -> list[dict]:
    return [
        dict(event_id=e.event_id, ordinal=i, workspace_id=e.workspace_id, observation_id=e.observation_id,
             message_id=s.message_id, span=s.span)
        for e in events for i, s in enumerate(e.sources)
    ]


def observation_added(conn: Connection, events: Sequence[ObservationAdded]) -> None:
    _insert_new(conn, observations, [
        dict(workspace_id=e.workspace_id, observation_id=e.observation_id, observer_id=e.observer_id,
             observed_id=e.observed_id, level=e.level.value, content=e.content, content_key=normalise(e.content),
             session_id=e.session_id, confidence=e.confidence, pattern_type=e.pattern_type,
             embedding=list(e.embedding) or None,
             embedding_model=e.embedding_model, times_derived=1, created_at=e.occurred_at,
             batch_id=e.batch_id, dream_id=e.dream_id, event_id=e.event_id)
        for e in events
    ])
    _insert_new(conn, observation_sources, _sources(events))
    _insert_new(conn, premises, [dict(workspace_id=e.workspace_id, observation_id=e.observation_id,
                                      premise_id=p) for e in events for p in e.premise_ids])


def observation_reinforced(conn: Connection, events: Sequence[ObservationReinforced]) -> None:
    for e in events:
        # the source rows are keyed by this event, so a repeat inserts nothing and must not count either
        added = conn.execute(insert(observation_sources).on_conflict_do_nothing()
                             .returning(observation_sources.c.event_id), _sources([e])).all() if e.sources else [1]
        if added:
            conn.execute(update(observations)
                         .where(observations.c.workspace_id == e.workspace_id,
                                observations.c.observation_id == e.observation_id)
                         .values(times_derived=observations.c.times_derived + 1))


def observation_superseded(conn: Connection, events: Sequence[ObservationSuperseded]) -> None:
    for e in events:
        conn.execute(update(observations)
                     .where(observations.c.workspace_id == e.workspace_id,
                            observations.c.observation_id == e.observation_id,
                            observations.c.superseded_by.is_(None))
                     .values(superseded_by=e.superseded_by, superseded_at=e.occurred_at))


def observation_deleted(conn: Connection, events: Sequence[ObservationDeleted]) -> None:
    for e in events:
        conn.execute(update(observations)
                     .where(observations.c.workspace_id == e.workspace_id,
                            observations.c.observation_id == e.observation_id,
                            observations.c.deleted_at.is_(None))
                     .values(deleted_at=e.occurred_at, delete_reason=e.reason))


def observation_rejected(conn: Connection, events: Sequence[ObservationRejected]) -> None:
    _insert_new(conn, rejected_observations, [
        dict(workspace_id=e.workspace_id, rejection_id=e.rejection_id, observer_id=e.observer_id,
             observed_id=e.observed_id, level=e.level.value, content=e.content, reason=e.reason,
             sources=[s.model_dump() for s in e.sources], batch_id=e.batch_id, rejected_at=e.occurred_at,
             event_id=e.event_id)
        for e in events
    ])


def derivation_started(conn: Connection, events: Sequence[DerivationStarted]) -> None:
    # a batch retried after a crash starts again under the same id: keep the first start
    _insert_new(conn, derivation_batches, [
        dict(workspace_id=e.workspace_id, batch_id=e.batch_id, observer_id=e.observer_id,
             observed_id=e.observed_id, message_ids=list(e.message_ids), state="in_flight",
             started_at=e.occurred_at)
        for e in events
    ])


def _finish(conn: Connection, e, values: dict) -> None:
    stmt = insert(derivation_batches).values(
        workspace_id=e.workspace_id, batch_id=e.batch_id, observer_id=e.observer_id,
        observed_id=e.observed_id, message_ids=list(e.message_ids), finished_at=e.occurred_at, **values)
    conn.execute(stmt.on_conflict_do_update(
        index_elements=["workspace_id", "batch_id"],
        set_={"finished_at": e.occurred_at, **values}))


def batch_derived(conn: Connection, events: Sequence[BatchDerived]) -> None:
    for e in events:
        _finish(conn, e, dict(state="done", added=e.added, reinforced=e.reinforced, superseded=e.superseded,
                              rejected=e.rejected, model=e.model, error=None))


def derivation_dead_lettered(conn: Connection, events: Sequence[DerivationDeadLettered]) -> None:
    for e in events:
        _finish(conn, e, dict(state="dead_lettered", error=e.error))
    _insert_new(conn, dead_letters, [
        dict(event_id=e.event_id, workspace_id=e.workspace_id, kind="derivation", observer_id=e.observer_id,
             observed_id=e.observed_id, batch_id=e.batch_id, message_ids=list(e.message_ids), error=e.error,
             attempts=e.attempts, failed_at=e.occurred_at)
        for e in events
    ])


def peer_card_updated(conn: Connection, events: Sequence[PeerCardUpdated]) -> None:
    _insert_new(conn, peer_cards, [
        dict(event_id=e.event_id, workspace_id=e.workspace_id, observer_id=e.observer_id,
             observed_id=e.observed_id, entries=list(e.entries), updated_at=e.occurred_at)
        for e in events
    ])


def summary_updated(conn: Connection, events: Sequence[SummaryUpdated]) -> None:
    _insert_new(conn, summaries, [
        dict(event_id=e.event_id, workspace_id=e.workspace_id, session_id=e.session_id, kind=e.kind.value,
             content=e.content, last_message_id=e.last_message_id, last_seq=e.last_seq,
             messages_covered=e.messages_covered, token_count=e.token_count, model=e.model,
             created_at=e.occurred_at)
        for e in events
    ])


def summary_dead_lettered(conn: Connection, events: Sequence[SummaryDeadLettered]) -> None:
    _insert_new(conn, dead_letters, [
        dict(event_id=e.event_id, workspace_id=e.workspace_id, kind="summary", session_id=e.session_id,
             message_ids=[], error=e.error, attempts=e.attempts, failed_at=e.occurred_at)
        for e in events
    ])


MEMORY_HANDLERS = {
    MessagePerceived: message_perceived,
    DerivationDue: derivation_due,
    ObservationAdded: observation_added,
    ObservationReinforced: observation_reinforced,
    ObservationSuperseded: observation_superseded,
    ObservationDeleted: observation_deleted,
    ObservationRejected: observation_rejected,
    DerivationStarted: derivation_started,
    BatchDerived: batch_derived,
    DerivationDeadLettered: derivation_dead_lettered,
    PeerCardUpdated: peer_card_updated,
    SummaryUpdated: summary_updated,
    SummaryDeadLettered: summary_dead_lettered,
}
