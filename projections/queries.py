"""Read queries over the projections (asyncio). Every query is scoped by workspace."""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import RowMapping, Text, bindparam, case, func, literal, select, tuple_
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.derivations import current_label
from projections.schema import (
    dead_letters,
    derivation_batches,
    dreams,
    memberships,
    message_origins,
    messages,
    peer_cards,
    peers,
    perceptions,
    projection_offsets,
    sessions,
    summaries,
    workspaces,
)


async def workspace(conn: AsyncConnection, workspace_id: str) -> RowMapping | None:
    row = await conn.execute(select(workspaces).where(workspaces.c.workspace_id == workspace_id))
    return row.mappings().first()


async def list_workspaces(conn: AsyncConnection, after: str, limit: int,
                          only: Collection[str] | None = None) -> Sequence[RowMapping]:
    """Workspaces after `after` in id order; only those in `only` unless it is None."""
    stmt = (
        select(workspaces)
        .where(workspaces.c.workspace_id > after)
        .order_by(workspaces.c.workspace_id)
        .limit(limit)
    )
    if only is not None:
        stmt = stmt.where(workspaces.c.workspace_id.in_(sorted(only)))
    return (await conn.execute(stmt)).mappings().all()


async def peer(conn: AsyncConnection, workspace_id: str, peer_id: str) -> RowMapping | None:
    stmt = select(peers).where(peers.c.workspace_id == workspace_id, peers.c.peer_id == peer_id)
    return (await conn.execute(stmt)).mappings().first()


async def existing_peers(conn: AsyncConnection, workspace_id: str, peer_ids: Sequence[str]) -> set[str]:
    stmt = select(peers.c.peer_id).where(
        peers.c.workspace_id == workspace_id, peers.c.peer_id.in_(list(peer_ids))
    )
    return set((await conn.scalars(stmt)).all())


@dataclass(frozen=True)
class Known:
    workspace: bool
    peers: frozenset[str]
    sessions: frozenset[str]


@functools.cache
def _known_statement():
    """Built once: the scope check runs on every read, and building it cost more than running it."""
    workspace_id = bindparam("workspace_id")

    def ids(column, table, name):
        return (select(func.coalesce(func.array_agg(column), literal([], ARRAY(Text))))
                .where(table.c.workspace_id == workspace_id, column.in_(bindparam(name, expanding=True)))
                .scalar_subquery())
    return select(select(workspaces.c.workspace_id).where(workspaces.c.workspace_id == workspace_id).exists(),
                  ids(peers.c.peer_id, peers, "peer_ids"), ids(sessions.c.session_id, sessions, "session_ids"))


async def known(conn: AsyncConnection, workspace_id: str, peer_ids: Sequence[str], session_ids: Sequence[str]) -> Known:
    """Whether the workspace exists, and which of the given peers and sessions it has (one round trip)."""
    row = (await conn.execute(_known_statement(), {"workspace_id": workspace_id, "peer_ids": list(peer_ids),
                                                  "session_ids": list(session_ids)})).one()
    return Known(row[0], frozenset(row[1]), frozenset(row[2]))


async def peer_observe_me(conn: AsyncConnection, workspace_id: str, peer_ids: set[str]) -> dict[str, bool]:
    stmt = select(peers.c.peer_id, peers.c.observe_me).where(
        peers.c.workspace_id == workspace_id, peers.c.peer_id.in_(sorted(peer_ids))
    )
    return {p: o for p, o in await conn.execute(stmt)}


async def list_peers(
    conn: AsyncConnection, workspace_id: str, after: str, limit: int
) -> Sequence[RowMapping]:
    stmt = (
        select(peers)
        .where(peers.c.workspace_id == workspace_id, peers.c.peer_id > after)
        .order_by(peers.c.peer_id)
        .limit(limit)
    )
    return (await conn.execute(stmt)).mappings().all()


async def session(conn: AsyncConnection, workspace_id: str, session_id: str) -> RowMapping | None:
    stmt = select(sessions).where(
        sessions.c.workspace_id == workspace_id, sessions.c.session_id == session_id
    )
    return (await conn.execute(stmt)).mappings().first()


async def list_sessions(
    conn: AsyncConnection, workspace_id: str, member: str, after: str, limit: int
) -> Sequence[RowMapping]:
    stmt = select(sessions).where(
        sessions.c.workspace_id == workspace_id, sessions.c.session_id > after
    )
    if member:
        stmt = stmt.where(
            sessions.c.session_id.in_(
                select(memberships.c.session_id).where(
                    memberships.c.workspace_id == workspace_id, memberships.c.peer_id == member
                )
            )
        )
    return (await conn.execute(stmt.order_by(sessions.c.session_id).limit(limit))).mappings().all()


async def memberships_of(
    conn: AsyncConnection, workspace_id: str, session_ids: Sequence[str]
) -> dict[str, list[RowMapping]]:
    """Every membership period of the given sessions, in join order, by session id."""
    stmt = (
        select(memberships)
        .where(memberships.c.workspace_id == workspace_id, memberships.c.session_id.in_(list(session_ids)))
        .order_by(memberships.c.joined_at, memberships.c.joined_event_id)
    )
    out: dict[str, list[RowMapping]] = {s: [] for s in session_ids}
    for row in (await conn.execute(stmt)).mappings():
        out[row["session_id"]].append(row)
    return out


async def current_members(conn: AsyncConnection, workspace_id: str, session_id: str) -> set[str]:
    stmt = select(memberships.c.peer_id).where(
        memberships.c.workspace_id == workspace_id,
        memberships.c.session_id == session_id,
        memberships.c.left_event_id.is_(None),
    )
    return set((await conn.scalars(stmt)).all())


# what reads of messages return: not the embedding (384 floats parsed per row) nor the tsvector
MESSAGE_COLUMNS = [c for c in messages.c if c.name not in ("embedding", "embedding_model", "embedding_event_id",
                                                           "content_tsv")]


async def message(conn: AsyncConnection, workspace_id: str, message_id: str) -> RowMapping | None:
    """A message with, if it is a copy, where it was first sent (origin_* columns, else NULL)."""
    m, o = messages.c, message_origins.c
    stmt = (select(*MESSAGE_COLUMNS, o.origin_workspace_id, o.origin_session_id, o.origin_message_id)
            .outerjoin(message_origins, (o.workspace_id == m.workspace_id) & (o.message_id == m.message_id))
            .where(m.workspace_id == workspace_id, m.message_id == message_id))
    return (await conn.execute(stmt)).mappings().first()


async def origins(conn: AsyncConnection, workspace_id: str, message_ids: Sequence[str]) -> dict[str, RowMapping]:
    """Where each copy among `message_ids` was first sent, by message id (originals are absent)."""
    o = message_origins.c
    stmt = select(message_origins).where(o.workspace_id == workspace_id, o.message_id.in_(list(message_ids)))
    return {r["message_id"]: r for r in (await conn.execute(stmt)).mappings()}


@functools.cache
def _messages_statement(after: bool, reverse: bool, perspective: bool, before: bool = False):
    c = messages.c
    stmt = select(*MESSAGE_COLUMNS).where(c.workspace_id == bindparam("workspace_id"),
                                          c.session_id == bindparam("session_id"))
    if after:
        stmt = stmt.where(c.seq < bindparam("after_seq") if reverse else c.seq > bindparam("after_seq"))
    if before:  # as of a time: sent before it, the message search's bound (created_at < before)
        stmt = stmt.where(c.created_at < bindparam("before"))
    if perspective:
        stmt = stmt.where(seen_while_member(messages, bindparam("perspective_id")))
    return stmt.order_by(c.seq.desc() if reverse else c.seq).limit(bindparam("limit"))


async def list_messages(
    conn: AsyncConnection, workspace_id: str, session_id: str, after_seq: int | None,
    limit: int, reverse: bool, perspective_id: str = "", before: datetime | None = None,
) -> Sequence[RowMapping]:
    """A session's messages in seq order (newest first when `reverse`), after `after_seq` if given; with a
    `perspective_id`, only those that peer saw (`seen_while_member`); with `before`, only those sent before it."""
    stmt = _messages_statement(after_seq is not None, reverse, bool(perspective_id), before is not None)
    values = {"workspace_id": workspace_id, "session_id": session_id, "after_seq": after_seq, "limit": limit,
              "perspective_id": perspective_id, "before": before}
    return (await conn.execute(stmt, values)).mappings().all()


async def projected_offsets(
    conn: AsyncConnection, partitions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """Next offset the projections will apply, per (topic, partition)."""
    t = projection_offsets.c
    stmt = select(t.topic, t.partition, t.next_offset).where(
        tuple_(t.topic, t.partition).in_(list(partitions))
    )
    return {(topic, p): n for topic, p, n in await conn.execute(stmt)}


async def messages_by_id(
    conn: AsyncConnection, workspace_id: str, message_ids: Sequence[str]
) -> dict[str, RowMapping]:
    """The workspace's messages among `message_ids`, by id (unknown ids are absent)."""
    stmt = select(*MESSAGE_COLUMNS).where(
        messages.c.workspace_id == workspace_id, messages.c.message_id.in_(sorted(set(message_ids)))
    )
    return {r["message_id"]: r for r in (await conn.execute(stmt)).mappings()}


async def dreams_of(conn: AsyncConnection, workspace_id: str, observer_id: str, observed_id: str,
                    limit: int) -> Sequence[RowMapping]:
    """A pair's dreams, newest request first."""
    d = dreams.c
    stmt = (select(dreams)
            .where(d.workspace_id == workspace_id, d.observer_id == observer_id, d.observed_id == observed_id)
            .order_by(d.requested_at.desc(), d.dream_id.desc()).limit(limit))
    return (await conn.execute(stmt)).mappings().all()


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
    stmt = select(p.observer_id, p.observed_id, p.message_id).where(p.workspace_id == scope.workspace_id)
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
    stmt = select(b.observer_id, b.observed_id, func.unnest(b.message_ids).label("message_id"),
                  rank.label("rank")).where(b.workspace_id == scope.workspace_id, _current(b))
    if scope.observer_id:
        stmt = stmt.where(b.observer_id == scope.observer_id)
    if scope.observed_id:
        stmt = stmt.where(b.observed_id == scope.observed_id)
    per_message = stmt.subquery("batched_messages")
    m = per_message.c
    return (select(m.observer_id, m.observed_id, m.message_id, func.min(m.rank).label("rank"))
            .group_by(m.observer_id, m.observed_id, m.message_id).subquery("batched"))


async def processing_counts(conn: AsyncConnection, scope: StatusScope) -> dict[str, int]:
    """Perceived messages in scope by derivation state (see PROCESSING_STATES); every state present."""
    perceived, batched = _perceived_in(scope), _batched_in(scope)
    rank = func.coalesce(batched.c.rank, literal(len(BATCH_STATES)))
    joined = perceived.outerjoin(batched, (perceived.c.observer_id == batched.c.observer_id)
                                 & (perceived.c.observed_id == batched.c.observed_id)
                                 & (perceived.c.message_id == batched.c.message_id))
    stmt = select(rank.label("rank"), func.count()).select_from(joined).group_by(rank)
    counts = dict.fromkeys(PROCESSING_STATES, 0)
    for r, n in await conn.execute(stmt):
        counts[PROCESSING_STATES[min(r, len(BATCH_STATES))]] = n
    return counts


DREAM_STATES = ("requested", "started", "completed", "failed")


async def dream_counts(conn: AsyncConnection, scope: StatusScope) -> dict[str, int]:
    """Dreams of the pairs in scope by state (every state present); a dream has no session."""
    d = dreams.c
    stmt = select(d.state, func.count()).where(d.workspace_id == scope.workspace_id).group_by(d.state)
    if scope.observer_id:
        stmt = stmt.where(d.observer_id == scope.observer_id)
    if scope.observed_id:
        stmt = stmt.where(d.observed_id == scope.observed_id)
    return {**dict.fromkeys(DREAM_STATES, 0), **{state: n for state, n in await conn.execute(stmt)}}


def _outstanding(b):
    """True while some message of dead-lettered batch `b` is in no finished batch of its derivation; once
    a retry (`peerlog derivations retry`, a promotion's catch-up) has derived them all, it needs no one."""
    later = derivation_batches.alias("later").c
    message = func.unnest(b.message_ids).table_valued("id").render_derived("m")
    finished = select(literal(1)).where(
        later.workspace_id == b.workspace_id, later.observer_id == b.observer_id,
        later.observed_id == b.observed_id, later.derivation == b.derivation, later.state == "done",
        message.c.id == later.message_ids.any_()).correlate(derivation_batches, message)
    return select(literal(1)).select_from(message).where(~finished.exists()).correlate(derivation_batches).exists()


async def dead_lettered_summaries(conn: AsyncConnection, scope: StatusScope, limit: int) -> Sequence[RowMapping]:
    """Summary dead letters of the workspace (or the session in scope) whose session has no summary written
    since, most recent first."""
    d, s = dead_letters.c, summaries.c
    since = select(literal(1)).where(s.workspace_id == d.workspace_id, s.session_id == d.session_id,
                                     s.created_at > d.failed_at)
    stmt = select(dead_letters).where(d.workspace_id == scope.workspace_id, d.kind == "summary", ~since.exists())
    if scope.session_id:
        stmt = stmt.where(d.session_id == scope.session_id)
    return (await conn.execute(stmt.order_by(d.failed_at.desc(), d.event_id).limit(limit))).mappings().all()


async def dead_lettered_batches(conn: AsyncConnection, scope: StatusScope, limit: int) -> Sequence[RowMapping]:
    """Dead-lettered derivation batches with a perceived message in scope that no retry has finished since,
    most recent first."""
    b, p = derivation_batches.c, perceptions.c
    in_scope = select(literal(1)).where(
        p.workspace_id == b.workspace_id, p.observer_id == b.observer_id, p.observed_id == b.observed_id,
        p.message_id == b.message_ids.any_(),
    )
    if scope.session_id:
        in_scope = in_scope.where(p.session_id == scope.session_id)
    stmt = select(derivation_batches).where(
        b.workspace_id == scope.workspace_id, _current(b), b.state == "dead_lettered", in_scope.exists(),
        _outstanding(b))
    if scope.observer_id:
        stmt = stmt.where(b.observer_id == scope.observer_id)
    if scope.observed_id:
        stmt = stmt.where(b.observed_id == scope.observed_id)
    order = [b.finished_at.desc().nulls_last(), b.batch_id]
    return (await conn.execute(stmt.order_by(*order).limit(limit))).mappings().all()


@functools.cache
def _summaries_statement(as_of: bool = False):
    t = summaries.c
    return (select(summaries)
            .where(t.workspace_id == bindparam("workspace_id"), t.session_id == bindparam("session_id"))
            .where(t.created_at <= bindparam("as_of") if as_of else True)
            .order_by(t.kind, t.last_seq.desc(), t.created_at.desc(), t.event_id.desc())
            .distinct(t.kind))


async def latest_summaries(conn: AsyncConnection, workspace_id: str, session_id: str,
                           as_of: datetime | None = None) -> dict[str, RowMapping]:
    """The latest summary of each kind a session has (had at `as_of`, if given), by kind ("short", "long")."""
    values = {"workspace_id": workspace_id, "session_id": session_id, "as_of": as_of}
    rows = await conn.execute(_summaries_statement(as_of is not None), values)
    return {r["kind"]: r for r in rows.mappings()}


def seen_while_member(t, observer):
    """The perspective rule, declared once: a condition on rows of message table (or alias) `t` that
    `observer` (a peer id or a bound parameter) could see them, i.e. they were appended while it was a
    member of their session, in log order (after its join, not after its leave): the rule the router
    perceives by. Every read of messages under a perspective uses it."""
    m, ms = t.c, memberships.c
    return select(literal(1)).where(
        ms.workspace_id == m.workspace_id, ms.session_id == m.session_id, ms.peer_id == observer,
        ms.joined_after_seq < m.seq, ms.left_after_seq.is_(None) | (m.seq <= ms.left_after_seq),
    ).exists()


async def seen_by(conn: AsyncConnection, workspace_id: str, observer_id: str, message_ids: Sequence[str]) -> set[str]:
    """The given messages that `observer_id` could see: sent while it was a member of their session."""
    m = messages.c
    stmt = select(m.message_id).where(m.workspace_id == workspace_id, m.message_id.in_(list(message_ids)),
                                      seen_while_member(messages, observer_id))
    return set((await conn.scalars(stmt)).all())


@functools.cache
def _card_statement(as_of: bool):
    c = peer_cards.c
    return (select(peer_cards)
            .where(c.workspace_id == bindparam("workspace_id"), c.observer_id == bindparam("observer_id"),
                   c.observed_id == bindparam("observed_id"))
            .where(c.updated_at <= bindparam("as_of") if as_of else True)
            .order_by(c.updated_at.desc(), c.event_id.desc()).limit(1))


async def peer_card(conn: AsyncConnection, workspace_id: str, observer_id: str, observed_id: str,
                    as_of: datetime | None = None) -> RowMapping | None:
    """The latest card of a pair (as it stood at `as_of`, if given), or None."""
    values = {"workspace_id": workspace_id, "observer_id": observer_id, "observed_id": observed_id, "as_of": as_of}
    return (await conn.execute(_card_statement(as_of is not None), values)).mappings().first()
