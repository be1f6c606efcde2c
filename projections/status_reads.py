"""Reads of processing status: derivation and dream states, dead letters, the projections' consumed offsets
(asyncio). Every query is scoped by workspace."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import RowMapping, case, exists, func, literal, select, true, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.derivations import current_label
from projections.schema import (
    dead_letters,
    derivation_batches,
    dreams,
    memberships,
    messages,
    perceptions,
    projection_offsets,
    summaries,
)


async def projected_offsets(conn: AsyncConnection) -> dict[tuple[str, int], int]:
    """Next offset the projections will apply, for every (topic, partition) they have applied."""
    t = projection_offsets.c
    return {(topic, p): n for topic, p, n in await conn.execute(select(t.topic, t.partition, t.next_offset))}


async def dreams_of(
    conn: AsyncConnection, workspace_id: str, observer_id: str, observed_id: str, limit: int
) -> Sequence[RowMapping]:
    """A pair's dreams, newest request first."""
    d = dreams.c
    stmt = (
        select(dreams)
        .where(d.workspace_id == workspace_id, d.observer_id == observer_id, d.observed_id == observed_id)
        .order_by(d.requested_at.desc(), d.dream_id.desc())
        .limit(limit)
    )
    return (await conn.execute(stmt)).mappings().all()


async def latest_perception(
    conn: AsyncConnection, workspace_id: str, observer_id: str, observed_id: str
) -> RowMapping | None:
    """The pair's latest perceived message (`message_id`, `session_id`, and `recorded_at`, when it was
    accepted), None when it perceived none. Latest by when the router perceived it, which is the order the
    dream scheduler reads them in: across sessions, a message accepted earlier can be routed later."""
    p, m = perceptions.c, messages.c
    stmt = (
        select(m.message_id, m.session_id, m.recorded_at)
        .join_from(perceptions, messages, (m.workspace_id == p.workspace_id) & (m.message_id == p.message_id))
        .where(p.workspace_id == workspace_id, p.observer_id == observer_id, p.observed_id == observed_id)
        .order_by(p.perceived_at.desc(), p.event_id.desc())
        .limit(1)
    )
    return (await conn.execute(stmt)).mappings().first()


@dataclass(frozen=True)
class StatusScope:
    """Which perceived messages a processing status covers: a workspace, optionally narrowed."""

    workspace_id: str
    observer_id: str = ""
    observed_id: str = ""
    session_id: str = ""


# a perceived message counts once, in the first of these states that covers it
BATCH_STATES = ("done", "dead_lettered", "in_flight")
PROCESSING_STATES = (*BATCH_STATES, "pending")


def _perceived_in(scope: StatusScope):
    p = perceptions.c
    stmt = select(p.observer_id, p.observed_id, p.message_id, p.session_id).where(p.workspace_id == scope.workspace_id)
    if scope.observer_id:
        stmt = stmt.where(p.observer_id == scope.observer_id)
    if scope.observed_id:
        stmt = stmt.where(p.observed_id == scope.observed_id)
    if scope.session_id:
        stmt = stmt.where(p.session_id == scope.session_id)
    return stmt.subquery("perceived")


def _current(b):
    """Batches of their pair's current derivation: status speaks of what reads serve."""
    return b.derivation == current_label(b.workspace_id, b.observer_id, b.observed_id)


def _batched_in(scope: StatusScope):
    """Per (pair, message) in a batch: the rank of the best state any of its batches reached."""
    b = derivation_batches.c
    rank = case(*[(b.state == s, i) for i, s in enumerate(BATCH_STATES)], else_=len(BATCH_STATES))
    stmt = select(
        b.observer_id, b.observed_id, func.unnest(b.message_ids).label("message_id"), rank.label("rank")
    ).where(b.workspace_id == scope.workspace_id, _current(b))
    if scope.observer_id:
        stmt = stmt.where(b.observer_id == scope.observer_id)
    if scope.observed_id:
        stmt = stmt.where(b.observed_id == scope.observed_id)
    per_message = stmt.subquery("batched_messages")
    m = per_message.c
    return (
        select(m.observer_id, m.observed_id, m.message_id, func.min(m.rank).label("rank"))
        .group_by(m.observer_id, m.observed_id, m.message_id)
        .subquery("batched")
    )


async def processing_counts(conn: AsyncConnection, scope: StatusScope) -> dict[str, int]:
    """Perceived messages in scope by derivation state (see PROCESSING_STATES); every state present."""
    perceived, batched = _perceived_in(scope), _batched_in(scope)
    rank = func.coalesce(batched.c.rank, literal(len(BATCH_STATES)))
    joined = perceived.outerjoin(
        batched,
        (perceived.c.observer_id == batched.c.observer_id)
        & (perceived.c.observed_id == batched.c.observed_id)
        & (perceived.c.message_id == batched.c.message_id),
    )
    stmt = select(rank.label("rank"), func.count()).select_from(joined).group_by(rank)
    counts = dict.fromkeys(PROCESSING_STATES, 0)
    for r, n in await conn.execute(stmt):
        counts[PROCESSING_STATES[min(r, len(BATCH_STATES))]] = n
    return counts


DREAM_STATES = ("requested", "started", "completed", "failed")


async def dream_counts(conn: AsyncConnection, scope: StatusScope) -> dict[str, int]:
    """Dreams of the pairs in scope by state (every state present). A dream has no session: a scope of a
    session and no observer counts none, since it names no pair (a session token covers none)."""
    none = dict.fromkeys(DREAM_STATES, 0)
    if scope.session_id and not scope.observer_id:
        return none
    d = dreams.c
    stmt = select(d.state, func.count()).where(d.workspace_id == scope.workspace_id).group_by(d.state)
    if scope.observer_id:
        stmt = stmt.where(d.observer_id == scope.observer_id)
    if scope.observed_id:
        stmt = stmt.where(d.observed_id == scope.observed_id)
    return {**none, **{state: n for state, n in await conn.execute(stmt)}}


def _finished_messages():
    """Every message a finished batch derived, with the batch's pair and derivation."""
    done = derivation_batches.alias("done").c
    messages = func.unnest(done.message_ids).label("message_id")
    return (
        select(done.workspace_id, done.observer_id, done.observed_id, done.derivation, messages)
        .where(done.state == "done")
        .subquery("finished")
    )


def _outstanding_batches():
    """The pair and id of each dead-lettered batch with a message that no finished batch of its derivation
    derived."""
    dead = derivation_batches.alias("dead")
    d = dead.c
    message = func.unnest(d.message_ids).table_valued("id").render_derived("m")
    f = _finished_messages().c
    finished = exists().where(
        f.workspace_id == d.workspace_id,
        f.observer_id == d.observer_id,
        f.observed_id == d.observed_id,
        f.derivation == d.derivation,
        f.message_id == message.c.id,
    )
    parked = select(d.workspace_id, d.observer_id, d.observed_id, d.batch_id).select_from(dead.join(message, true()))
    return parked.where(d.state == "dead_lettered", ~finished)


def outstanding(b):
    """True while some message of dead-lettered batch `b` is in no finished batch of its derivation; once
    a retry (`peerlog derivations retry`, a promotion's catch-up) has derived them all, it needs no one."""
    # every dead-lettered batch at once, in one anti-join hashed on (pair, derivation, message): batch by batch,
    # each message was matched by `= any(message_ids)` against each finished batch of its pair (12 s a scrape for
    # 32,000 messages of a pair, 800 batches of them parked and retried). The pair is in the key so that a read
    # scoped to a pair reads that pair's batches only
    return tuple_(b.workspace_id, b.observer_id, b.observed_id, b.batch_id).in_(_outstanding_batches())


async def dead_lettered_summaries(conn: AsyncConnection, scope: StatusScope, limit: int) -> Sequence[RowMapping]:
    """Summary dead letters of the sessions in scope whose session has no summary of their kind written since
    (or whose messages were dropped, which no later summary covers), most recent first. The sessions in scope: the workspace's, or the one named; with an observer or observed
    peer, only those where it perceived a message, and only failures while it was a member (a peer's status
    does not speak of sessions it was never in, nor of what they did after it left)."""
    d, s = dead_letters.c, summaries.c
    since = select(literal(1)).where(
        s.workspace_id == d.workspace_id,
        s.session_id == d.session_id,
        s.created_at > d.failed_at,
        d.summary_kind.is_(None) | (s.kind == d.summary_kind),  # a long summary does not stand for a short one
    )
    stmt = select(dead_letters).where(
        d.workspace_id == scope.workspace_id, d.kind == "summary", d.summary_dropped | ~since.exists()
    )
    if scope.session_id:
        stmt = stmt.where(d.session_id == scope.session_id)
    if scope.observer_id or scope.observed_id:
        perceived = _perceived_in(scope)
        stmt = stmt.where(d.session_id.in_(select(perceived.c.session_id)))
        stmt = stmt.where(*(_member_when_it_failed(d, peer) for peer in (scope.observer_id, scope.observed_id) if peer))
    return (await conn.execute(stmt.order_by(d.failed_at.desc(), d.event_id).limit(limit))).mappings().all()


def _member_when_it_failed(d, peer_id: str):
    """The peer was a member of the dead letter's session when its summary failed: one that failed after
    the peer left told a removed member's token that the session went on, how far, and when."""
    m = memberships.c
    return (
        select(literal(1))
        .where(
            m.workspace_id == d.workspace_id,
            m.session_id == d.session_id,
            m.peer_id == peer_id,
            m.joined_at <= d.failed_at,
            m.left_at.is_(None) | (m.left_at >= d.failed_at),
        )
        .exists()
    )


def _batch_columns(scope: StatusScope):
    """A batch's columns; in a session's scope its message ids only of that session, in order (a batch
    of a pair spans the sessions the pair shares, and the others are not the scope's to show)."""
    b = derivation_batches.c
    if not scope.session_id:
        return [derivation_batches]
    p = perceptions.c
    m = func.unnest(b.message_ids).table_valued("id", with_ordinality="n").render_derived("m")
    kept = (
        select(m.c.id)
        .where(
            select(literal(1))
            .where(
                p.workspace_id == b.workspace_id,
                p.observer_id == b.observer_id,
                p.observed_id == b.observed_id,
                p.message_id == m.c.id,
                p.session_id == scope.session_id,
            )
            .correlate(derivation_batches, m)
            .exists()
        )
        .order_by(m.c.n)
        .correlate(derivation_batches)
    )
    others = [c for c in derivation_batches.c if c.name != "message_ids"]
    return [*others, func.array(kept.scalar_subquery()).label("message_ids")]


async def dead_lettered_batches(conn: AsyncConnection, scope: StatusScope, limit: int) -> Sequence[RowMapping]:
    """Dead-lettered derivation batches with a perceived message in scope that no retry has finished since,
    most recent first."""
    b, p = derivation_batches.c, perceptions.c
    in_scope = select(literal(1)).where(
        p.workspace_id == b.workspace_id,
        p.observer_id == b.observer_id,
        p.observed_id == b.observed_id,
        p.message_id == b.message_ids.any_(),
    )
    if scope.session_id:
        in_scope = in_scope.where(p.session_id == scope.session_id)
    stmt = select(*_batch_columns(scope)).where(
        b.workspace_id == scope.workspace_id,
        _current(b),
        b.state == "dead_lettered",
        in_scope.exists(),
        outstanding(b),
    )
    if scope.observer_id:
        stmt = stmt.where(b.observer_id == scope.observer_id)
    if scope.observed_id:
        stmt = stmt.where(b.observed_id == scope.observed_id)
    order = [b.finished_at.desc().nulls_last(), b.batch_id]
    return (await conn.execute(stmt.order_by(*order).limit(limit))).mappings().all()
