"""Handlers of a pair store's observation events, with the provenance rule and the audit history.

Every event that touches an observation leaves a row in `observation_events` (added, reinforced,
superseded, supersedes, deleted, cited, cited_by_rejected, and supersession_refused or deletion_refused
for one the projector did not apply), so an observation's history can be read back without scanning the log. A derived observation whose premises break the provenance rule
(services/events/provenance.py) is not added: it is recorded as rejected, exactly as on replay.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, bindparam, func, select, update

from projections.inserts import insert_new
from projections.keys import TextArray
from projections.schema import (
    ACTIVE_EMBEDDING_MODEL,
    observation_events,
    observation_sources,
    observations,
    premises,
    rejected_observations,
)
from projections.vectors import Vector
from services.events import (
    PAIR_WIDE,
    Event,
    Level,
    ObservationAdded,
    ObservationDeleted,
    ObservationReinforced,
    ObservationRejected,
    ObservationsEmbedded,
    ObservationSuperseded,
)
from services.events.provenance import PremiseState, premise_problems
from services.events.text import normalise


def _history(e: Event, observation_id: str, kind: str, **detail) -> dict:
    return dict(
        workspace_id=e.workspace_id,
        observation_id=observation_id,
        event_id=e.event_id,
        kind=kind,
        occurred_at=e.occurred_at,
        producer=e.producer.model_dump(exclude_none=True),
        causation_id=e.causation_id,
        detail=detail,
    )


def _sources(events) -> list[dict]:
    return [
        dict(
            event_id=e.event_id,
            ordinal=i,
            workspace_id=e.workspace_id,
            observation_id=e.observation_id,
            message_id=s.message_id,
            span=s.span,
        )
        for e in events
        for i, s in enumerate(e.sources)
    ]


def _premise_states(conn: Connection, e: ObservationAdded) -> dict[str, PremiseState]:
    """The states of `e`'s premises in its own pair's store (premise_problems: not the workspace's)."""
    o = observations.c
    rows = conn.execute(
        select(o.observation_id, o.observer_id, o.observed_id, o.superseded_by, o.deleted_at).where(
            o.workspace_id == e.workspace_id,
            o.observation_id.in_(list(e.premise_ids)),
            o.observer_id == e.observer_id,
            o.observed_id == e.observed_id,
        )
    )
    return {
        r.observation_id: PremiseState(r.observer_id, r.observed_id, r.superseded_by is None and r.deleted_at is None)
        for r in rows
    }


def _rejection_history(e: ObservationAdded | ObservationRejected, rejection_id: str, reason: str) -> list[dict]:
    """The rejected write's own entry, so an auditor holding its id reads why it is not there, and one on
    each premise it cited."""
    own = _history(e, rejection_id, "rejected", reason=reason, observer_id=e.observer_id, observed_id=e.observed_id)
    return [own] + [_history(e, p, "cited_by_rejected", rejection=rejection_id) for p in dict.fromkeys(e.premise_ids)]


def _rejection(e: ObservationAdded, problems: list[str]) -> dict:
    return dict(
        workspace_id=e.workspace_id,
        rejection_id=e.observation_id,
        observer_id=e.observer_id,
        observed_id=e.observed_id,
        level=e.level.value,
        content=e.content,
        reason="; ".join(problems),
        sources=[s.model_dump() for s in e.sources],
        premise_ids=list(e.premise_ids),
        batch_id=e.batch_id,
        dream_id=e.dream_id,
        derivation=e.derivation,
        rejected_at=e.occurred_at,
        event_id=e.event_id,
    )


def _added_row(e: ObservationAdded) -> dict:
    # a vector of another model than the active one is not kept (see handlers.messages_embedded)
    active = e.embedding_model == ACTIVE_EMBEDDING_MODEL
    return dict(
        workspace_id=e.workspace_id,
        observation_id=e.observation_id,
        observer_id=e.observer_id,
        observed_id=e.observed_id,
        level=e.level.value,
        content=e.content,
        content_key=normalise(e.content),
        session_id=e.session_id,
        confidence=e.confidence,
        pattern_type=e.pattern_type,
        embedding=e.embedding.array() if active and e.embedding else None,
        embedding_model=e.embedding_model if active else "",
        times_derived=1,
        created_at=e.occurred_at,
        batch_id=e.batch_id,
        dream_id=e.dream_id,
        derivation=e.derivation,
        event_id=e.event_id,
    )


def _add(conn: Connection, events: Sequence[ObservationAdded]) -> None:
    if not events:
        return
    insert_new(conn, observations, [_added_row(e) for e in events])
    # an id another event holds (a client's id written twice: the API claims it, but a process that died
    # holding the claim lets a second write in): its sources, premises and history are not added to the
    # observation kept, which may be another pair's
    events = _kept(conn, events)
    insert_new(conn, observation_sources, _sources(events))
    insert_new(
        conn,
        premises,
        [
            dict(workspace_id=e.workspace_id, observation_id=e.observation_id, premise_id=p)
            for e in events
            for p in dict.fromkeys(e.premise_ids)
        ],
    )
    insert_new(
        conn,
        observation_events,
        [
            row
            for e in events
            for row in (
                _history(e, e.observation_id, "added", level=e.level.value, dream_id=e.dream_id, batch_id=e.batch_id),
                *(_history(e, p, "cited", by=e.observation_id) for p in dict.fromkeys(e.premise_ids)),
            )
        ],
    )


_BATCH = (
    func.unnest(bindparam("ids", type_=TextArray()), bindparam("events", type_=TextArray()))
    .table_valued("observation_id", "event_id")
    .render_derived(name="batch")
)
_HELD_BY_OTHERS = select(observations.c.observation_id).where(
    observations.c.workspace_id == bindparam("workspace_id"),
    observations.c.observation_id == _BATCH.c.observation_id,
    observations.c.event_id != _BATCH.c.event_id,
)


def _kept(conn: Connection, events: Sequence[ObservationAdded]) -> list[ObservationAdded]:
    """`events` but those whose observation id a row of another event holds."""
    lost: set[tuple[str, str]] = set()
    for workspace_id in {e.workspace_id for e in events}:
        mine = [e for e in events if e.workspace_id == workspace_id]
        params = {
            "workspace_id": workspace_id,
            "ids": [e.observation_id for e in mine],
            "events": [e.event_id for e in mine],
        }
        lost |= {(workspace_id, i) for i in conn.scalars(_HELD_BY_OTHERS, params)}
    return [e for e in events if (e.workspace_id, e.observation_id) not in lost]


def observation_added(conn: Connection, events: Sequence[ObservationAdded]) -> None:
    explicit = [e for e in events if e.level == Level.EXPLICIT]
    _add(conn, explicit)
    # derived ones one at a time: one may cite another written just before it in the same batch
    for e in (e for e in events if e.level != Level.EXPLICIT):
        problems = premise_problems(e.level, e.observer_id, e.observed_id, e.premise_ids, _premise_states(conn, e))
        if not problems:
            _add(conn, [e])
            _mark_if_resting_on_retired(conn, e)
        elif insert_new(conn, rejected_observations, [_rejection(e, problems)], returning=True):
            insert_new(conn, observation_events, _rejection_history(e, e.observation_id, "; ".join(problems)))


def observation_reinforced(conn: Connection, events: Sequence[ObservationReinforced]) -> None:
    for e in events:
        # the history row is keyed by this event: a repeat inserts nothing and must not count again
        if insert_new(
            conn, observation_events, [_history(e, e.observation_id, "reinforced", batch_id=e.batch_id)], returning=True
        ):
            insert_new(conn, observation_sources, _sources([e]))
            conn.execute(
                update(observations)
                .where(observations.c.workspace_id == e.workspace_id, observations.c.observation_id == e.observation_id)
                .values(times_derived=observations.c.times_derived + 1)
            )


def _mark_conclusions(conn: Connection, workspace_id: str, observation_id: str, at) -> None:
    """Mark every observation resting, through any chain of premises, on one that stopped being current."""
    p, o = premises.alias("p"), observations.c
    above = (
        select(premises.c.observation_id.label("id"))
        .where(premises.c.workspace_id == workspace_id, premises.c.premise_id == observation_id)
        .cte("above", recursive=True)
    )
    above = above.union(
        select(p.c.observation_id).join(above, p.c.premise_id == above.c.id).where(p.c.workspace_id == workspace_id)
    )
    conn.execute(
        update(observations)
        .where(
            o.workspace_id == workspace_id, o.observation_id.in_(select(above.c.id)), o.premise_superseded_at.is_(None)
        )
        .values(premise_superseded_at=at)
    )


def _mark_if_resting_on_retired(conn: Connection, e: ObservationAdded) -> None:
    """Mark the conclusion `e` added when a premise it cites is retired or already marked: it rests on a
    retired observation as much as those marked at the retirement (_mark_conclusions), which ran before it
    existed. Stamped with the event's own time, so a replay marks it alike."""
    o = observations.c
    broken = select(o.observation_id).where(
        o.workspace_id == e.workspace_id,
        o.observation_id.in_(list(e.premise_ids)),
        o.premise_superseded_at.is_not(None) | o.superseded_by.is_not(None) | o.deleted_at.is_not(None),
    )
    conn.execute(
        update(observations)
        .where(
            o.workspace_id == e.workspace_id,
            o.observation_id == e.observation_id,
            o.event_id == e.event_id,  # the row this event added, not one another event holds under its id
            o.premise_superseded_at.is_(None),
            broken.exists(),
        )
        .values(premise_superseded_at=e.occurred_at)
    )


def _retire(conn: Connection, e, values: dict, still_current) -> bool:
    """Retire `e`'s observation if `still_current`, marking what rests on it; whether it did."""
    done = conn.execute(
        update(observations)
        .where(
            observations.c.workspace_id == e.workspace_id,
            observations.c.observation_id == e.observation_id,
            still_current,
        )
        .values(**values)
        .returning(observations.c.observation_id)
    ).all()
    if done:
        _mark_conclusions(conn, e.workspace_id, e.observation_id, e.occurred_at)
    return bool(done)


def _replacement_problem(conn: Connection, e: ObservationSuperseded) -> str | None:
    """Why `e` cannot retire its observation for its replacement, or None. A replacement the projector
    rejected (a dream's premise deleted while it ran) is no observation: retiring the old one for it would
    leave the pair's store without the fact at all."""
    o = observations.c
    rows = {
        r.observation_id: r
        for r in conn.execute(
            select(o.observation_id, o.observer_id, o.observed_id, o.superseded_by, o.deleted_at, o.derivation).where(
                o.workspace_id == e.workspace_id, o.observation_id.in_([e.observation_id, e.superseded_by])
            )
        )
    }
    old, row = rows.get(e.observation_id), rows.get(e.superseded_by)
    # retired meanwhile (a dream read it live while the deriver's dedup or a client retired it): recorded
    # anyway, its history showed two supersessions where its row keeps one
    if old is not None and old.superseded_by is not None:
        return f"it was already superseded by {old.superseded_by}"
    if old is not None and old.deleted_at is not None:
        return "it was already deleted"
    # a staged re-derivation changes only when promoted; a client's observation is in every derivation
    if old is not None and old.derivation not in (e.derivation, PAIR_WIDE):
        return f"it is in derivation {old.derivation!r}, not {e.derivation!r}, the one superseding it"
    if row is None:
        return f"its replacement {e.superseded_by} is not an observation (it was rejected or never written)"
    if (row.observer_id, row.observed_id) != (e.observer_id, e.observed_id):
        return f"its replacement {e.superseded_by} belongs to the store of ({row.observer_id}, {row.observed_id})"
    if row.superseded_by is not None or row.deleted_at is not None:
        return f"its replacement {e.superseded_by} was already superseded or deleted"
    return None


def observation_superseded(conn: Connection, events: Sequence[ObservationSuperseded]) -> None:
    for e in events:
        problem = _replacement_problem(conn, e)
        if problem is not None:
            refused = _history(e, e.observation_id, "supersession_refused", by=e.superseded_by, reason=problem)
            insert_new(conn, observation_events, [refused])
            continue
        _retire(
            conn,
            e,
            dict(superseded_by=e.superseded_by, superseded_at=e.occurred_at),
            observations.c.superseded_by.is_(None),
        )
        insert_new(
            conn,
            observation_events,
            [
                _history(e, e.observation_id, "superseded", by=e.superseded_by, reason=e.reason),
                _history(e, e.superseded_by, "supersedes", replaces=e.observation_id, reason=e.reason),
            ],
        )


def _deletion_problem(conn: Connection, e: ObservationDeleted) -> str:
    """Why `e` retired nothing: its observation was deleted before (a dream's RemoveDeduction committed
    after a client's delete of it), or there is none."""
    o = observations.c
    held = conn.scalar(
        select(o.observation_id).where(o.workspace_id == e.workspace_id, o.observation_id == e.observation_id)
    )
    return (
        "it was already deleted" if held is not None else "it is not an observation (it was rejected or never written)"
    )


def observation_deleted(conn: Connection, events: Sequence[ObservationDeleted]) -> None:
    for e in events:
        values = dict(deleted_at=e.occurred_at, delete_reason=e.reason)
        if _retire(conn, e, values, observations.c.deleted_at.is_(None)):
            entry = _history(e, e.observation_id, "deleted", reason=e.reason)
        else:
            # recorded anyway, its history showed two deletions with two reasons where its row keeps one
            refused = _deletion_problem(conn, e)
            entry = _history(e, e.observation_id, "deletion_refused", reason=refused, requested_reason=e.reason)
        insert_new(conn, observation_events, [entry])


def observation_rejected(conn: Connection, events: Sequence[ObservationRejected]) -> None:
    insert_new(
        conn,
        rejected_observations,
        [
            dict(
                workspace_id=e.workspace_id,
                rejection_id=e.rejection_id,
                observer_id=e.observer_id,
                observed_id=e.observed_id,
                level=e.level.value,
                content=e.content,
                reason=e.reason,
                sources=[s.model_dump() for s in e.sources],
                premise_ids=list(e.premise_ids),
                batch_id=e.batch_id,
                dream_id=e.dream_id,
                derivation=e.derivation,
                rejected_at=e.occurred_at,
                event_id=e.event_id,
            )
            for e in events
        ],
    )
    insert_new(conn, observation_events, [h for e in events for h in _rejection_history(e, e.rejection_id, e.reason)])


_SET_EMBEDDING = (
    update(observations)
    .where(observations.c.workspace_id == bindparam("w"), observations.c.observation_id == bindparam("o"))
    .values(embedding=bindparam("v", type_=Vector()), embedding_model=bindparam("model"))
)


def observations_embedded(conn: Connection, events: Sequence[ObservationsEmbedded]) -> None:
    """Vectors of the active model onto their observations (which precede them on the pair's partition);
    a later event replaces an earlier one."""
    rows = [
        dict(w=e.workspace_id, o=o.observation_id, v=o.vector.array(), model=e.embedding_model)
        for e in events
        if e.embedding_model == ACTIVE_EMBEDDING_MODEL
        for o in e.observations
    ]
    if rows:
        conn.execute(_SET_EMBEDDING, rows)


OBSERVATION_HANDLERS = {
    ObservationAdded: observation_added,
    ObservationReinforced: observation_reinforced,
    ObservationSuperseded: observation_superseded,
    ObservationDeleted: observation_deleted,
    ObservationRejected: observation_rejected,
    ObservationsEmbedded: observations_embedded,
}
