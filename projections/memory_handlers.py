"""Handlers for the pair-store events: perceptions, batches, cards, summaries, dead letters (observations:
observation_handlers.py)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, bindparam, or_, update
from sqlalchemy.dialects.postgresql import insert

from projections.derivations import derivation_promoted
from projections.inserts import insert_new
from projections.log_time import after
from projections.observation_handlers import OBSERVATION_HANDLERS
from projections.peer_reads import card_statement
from projections.schema import (
    dead_letters,
    derivation_batches,
    peer_cards,
    perceptions,
    summaries,
)
from services.events import (
    BatchDerived,
    DerivationDeadLettered,
    DerivationDue,
    DerivationPromoted,
    DerivationStarted,
    MessagePerceived,
    PeerCardUpdated,
    SummaryDeadLettered,
    SummaryRetryRequested,
    SummaryUpdated,
)


def message_perceived(conn: Connection, events: Sequence[MessagePerceived]) -> None:
    insert_new(
        conn,
        perceptions,
        [
            dict(
                workspace_id=e.workspace_id,
                observer_id=e.observer_id,
                observed_id=e.observed_id,
                message_id=e.message_id,
                session_id=e.session_id,
                perceived_at=e.occurred_at,
                event_id=e.event_id,
            )
            for e in events
        ],
    )


def derivation_due(conn: Connection, events: Sequence[DerivationDue]) -> None:
    """Clock ticks change no projection."""


# A batch's row must come out the same in whatever order its events are read: its start and its result sit
# on the pair's observations topic, its dead letters on their own topic, and a projector catching up or a
# rebuild reads topics in no fixed order among themselves. So 'done' is final (the dead letter of a batch
# that `peerlog derivations retry` derived later changes nothing, read before or after), and a start read
# after the batch finished still gives the row its started_at.
_BATCH = derivation_batches.c
_STARTED_AT = (
    update(derivation_batches)
    .where(_BATCH.workspace_id == bindparam("w"), _BATCH.batch_id == bindparam("b"), _BATCH.started_at.is_(None))
    .values(started_at=bindparam("at"))
)


def derivation_started(conn: Connection, events: Sequence[DerivationStarted]) -> None:
    # a batch retried after a crash starts again under the same id: keep the first start
    inserted = insert_new(
        conn,
        derivation_batches,
        [
            dict(
                workspace_id=e.workspace_id,
                batch_id=e.batch_id,
                observer_id=e.observer_id,
                observed_id=e.observed_id,
                message_ids=list(e.message_ids),
                derivation=e.derivation,
                state="in_flight",
                started_at=e.occurred_at,
            )
            for e in events
        ],
        returning=True,
    )
    # a batch finished before its start was read: its row was there, without started_at (only rows not
    # inserted just now are looked at: mostly none, so mostly no statement)
    new = {tuple(key) for key in inserted}
    late = [
        dict(w=e.workspace_id, b=e.batch_id, at=e.occurred_at)
        for e in events
        if (e.workspace_id, e.batch_id) not in new
    ]
    if late:
        conn.execute(_STARTED_AT, late)


def _finish(conn: Connection, e, values: dict) -> None:
    stmt = insert(derivation_batches).values(
        workspace_id=e.workspace_id,
        batch_id=e.batch_id,
        observer_id=e.observer_id,
        observed_id=e.observed_id,
        message_ids=list(e.message_ids),
        derivation=e.derivation,
        finished_at=e.occurred_at,
        **values,
    )
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["workspace_id", "batch_id"],
            set_={"finished_at": e.occurred_at, **values},
            where=or_(_BATCH.state != "done", stmt.excluded.state == "done"),
        )
    )


def batch_derived(conn: Connection, events: Sequence[BatchDerived]) -> None:
    for e in events:
        _finish(
            conn,
            e,
            dict(
                state="done",
                added=e.added,
                reinforced=e.reinforced,
                superseded=e.superseded,
                rejected=e.rejected,
                model=e.model,
                error=None,
            ),
        )


def derivation_dead_lettered(conn: Connection, events: Sequence[DerivationDeadLettered]) -> None:
    for e in events:
        _finish(conn, e, dict(state="dead_lettered", error=e.error))
    insert_new(
        conn,
        dead_letters,
        [
            dict(
                event_id=e.event_id,
                workspace_id=e.workspace_id,
                kind="derivation",
                observer_id=e.observer_id,
                observed_id=e.observed_id,
                batch_id=e.batch_id,
                message_ids=list(e.message_ids),
                error=e.error,
                attempts=e.attempts,
                failed_at=e.occurred_at,
            )
            for e in events
        ],
    )


def peer_card_updated(conn: Connection, events: Sequence[PeerCardUpdated]) -> None:
    """Each card as its event says; a dream's only if the card still reads what the dream replaced (in log
    order: a card set meanwhile by a client stands). One at a time: a run's events may follow each other."""
    for e in events:
        now = _card_now(conn, e)
        if e.replaces is not None and (list(now["entries"]) if now else []) != list(e.replaces):
            continue
        row = dict(
            event_id=e.event_id,
            workspace_id=e.workspace_id,
            observer_id=e.observer_id,
            observed_id=e.observed_id,
            entries=list(e.entries),
            producer=e.producer.model_dump(exclude_none=True),
            dream_id=e.causation_id if e.replaces is not None else None,  # a dream's card names its dream
            # timed after the card before it (log_time.py): set from a host whose clock ran behind, a later
            # card read as older, and SetPeerCard's own reply showed the card it replaced
            updated_at=after(now["updated_at"] if now else None, e.occurred_at),
        )
        insert_new(conn, peer_cards, [row])


def _card_now(conn: Connection, e: PeerCardUpdated):
    """The pair's card row as reads show it (entries, updated_at), None when it has none."""
    pair = dict(workspace_id=e.workspace_id, observer_id=e.observer_id, observed_id=e.observed_id)
    return conn.execute(card_statement(), pair).mappings().first()


def summary_updated(conn: Connection, events: Sequence[SummaryUpdated]) -> None:
    insert_new(
        conn,
        summaries,
        [
            dict(
                event_id=e.event_id,
                workspace_id=e.workspace_id,
                session_id=e.session_id,
                kind=e.kind.value,
                content=e.content,
                last_message_id=e.last_message_id,
                last_seq=e.last_seq,
                messages_covered=e.messages_covered,
                token_count=e.token_count,
                model=e.model,
                created_at=e.occurred_at,
            )
            for e in events
        ],
    )


def summary_dead_lettered(conn: Connection, events: Sequence[SummaryDeadLettered]) -> None:
    insert_new(
        conn,
        dead_letters,
        [
            dict(
                event_id=e.event_id,
                workspace_id=e.workspace_id,
                kind="summary",
                session_id=e.session_id,
                message_ids=[],
                error=e.error,
                attempts=e.attempts,
                failed_at=e.occurred_at,
                summary_kind=e.kind.value,
                summary_dropped=e.dropped,
            )
            for e in events
        ],
    )


def summary_retry_requested(conn: Connection, events: Sequence[SummaryRetryRequested]) -> None:
    """A request changes no projection; the SummaryUpdated or SummaryDeadLettered it causes does."""


MEMORY_HANDLERS = {
    MessagePerceived: message_perceived,
    DerivationDue: derivation_due,
    DerivationPromoted: derivation_promoted,
    **OBSERVATION_HANDLERS,
    DerivationStarted: derivation_started,
    BatchDerived: batch_derived,
    DerivationDeadLettered: derivation_dead_lettered,
    PeerCardUpdated: peer_card_updated,
    SummaryUpdated: summary_updated,
    SummaryDeadLettered: summary_dead_lettered,
    SummaryRetryRequested: summary_retry_requested,
}
