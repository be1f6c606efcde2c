"""Reads of messages, and the perspective rule every read of messages under a perspective uses (asyncio).

Every query is scoped by workspace."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import BigInteger, RowMapping, Text, and_, bindparam, cast, func, literal, or_, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.schema import memberships, message_origins, messages

# what reads of messages return: not the embedding (384 floats parsed per row) nor the tsvector
MESSAGE_COLUMNS = [
    c for c in messages.c if c.name not in ("embedding", "embedding_model", "embedding_event_id", "content_tsv")
]
# what a turn packed into a context needs: not the metadata, which may hold 64 KB a message; and the id it
# was first sent under if it is a CloneSession copy (origin_message_id, else NULL), so a context packs a
# turn and its copies once
TURN_COLUMNS = [
    *(messages.c[name] for name in ("message_id", "seq", "peer_id", "content", "author_name")),
    message_origins.c.origin_message_id,
]


async def message(conn: AsyncConnection, workspace_id: str, message_id: str) -> RowMapping | None:
    """A message with, if it is a copy, where it was first sent (origin_* columns, else NULL)."""
    m = messages.c
    stmt = _with_origin().where(m.workspace_id == workspace_id, m.message_id == message_id)
    return (await conn.execute(stmt)).mappings().first()


def _with_origin():
    m, o = messages.c, message_origins.c
    return select(*MESSAGE_COLUMNS, o.origin_workspace_id, o.origin_session_id, o.origin_message_id).outerjoin(
        message_origins, (o.workspace_id == m.workspace_id) & (o.message_id == m.message_id)
    )


async def origins(conn: AsyncConnection, workspace_id: str, message_ids: Sequence[str]) -> dict[str, RowMapping]:
    """Where each copy among `message_ids` was first sent, by message id (originals are absent)."""
    o = message_origins.c
    stmt = select(message_origins).where(o.workspace_id == workspace_id, o.message_id.in_(list(message_ids)))
    return {r["message_id"]: r for r in (await conn.execute(stmt)).mappings()}


@functools.cache
def _messages_statement(after: bool, reverse: bool, perspective: bool, as_of: bool = False, turns: bool = False):
    c, o = messages.c, message_origins.c
    stmt = select(*(TURN_COLUMNS if turns else MESSAGE_COLUMNS)).where(
        c.workspace_id == bindparam("workspace_id"), c.session_id == bindparam("session_id")
    )
    if turns:
        stmt = stmt.outerjoin(message_origins, (o.workspace_id == c.workspace_id) & (o.message_id == c.message_id))
    if after:
        stmt = stmt.where(c.seq < bindparam("after_seq") if reverse else c.seq > bindparam("after_seq"))
    if as_of:
        stmt = stmt.where(*as_of_bound(messages, bindparam("as_of")))
    if perspective:
        stmt = stmt.where(seen_while_member(messages, bindparam("perspective_id")))
    return stmt.order_by(c.seq.desc() if reverse else c.seq).limit(bindparam("limit"))


async def list_messages(
    conn: AsyncConnection,
    workspace_id: str,
    session_id: str,
    after_seq: int | None,
    limit: int,
    reverse: bool,
    perspective_id: str = "",
    as_of: datetime | None = None,
    turns: bool = False,
) -> Sequence[RowMapping]:
    """A session's messages in seq order (newest first when `reverse`), after `after_seq` if given; with a
    `perspective_id`, only those that peer saw (`seen_while_member`); with `as_of`, only those there then
    (`as_of_bound`); with `turns`, only TURN_COLUMNS."""
    stmt = _messages_statement(after_seq is not None, reverse, bool(perspective_id), as_of is not None, turns)
    values = {
        "workspace_id": workspace_id,
        "session_id": session_id,
        "after_seq": after_seq,
        "limit": limit,
        "perspective_id": perspective_id,
        "as_of": as_of,
    }
    return (await conn.execute(stmt, values)).mappings().all()


@dataclass(frozen=True)
class ReplyBytes:
    """How the API bounds a row's bytes in a reply: `per_column` for each column besides the bytes of its text,
    and `per_json_byte` for each byte of its JSON; a page stops before its rows pass `budget`."""

    budget: int
    per_column: int
    per_json_byte: int


@dataclass(frozen=True)
class MessagePage:
    rows: Sequence[RowMapping]
    cut: bool  # the next message was left out for bytes: the session may hold more


async def message_page(
    conn: AsyncConnection,
    workspace_id: str,
    session_id: str,
    after_seq: int | None,
    limit: int,
    reverse: bool,
    size: ReplyBytes,
) -> MessagePage:
    """A session's messages in seq order (newest first when `reverse`), after `after_seq` if given, at most
    `limit`, and no more than fit `size.budget` (one at least). Postgres cuts the page: read whole and cut
    after, 300 rows of 60 KB metadata took 445 MB of the API's memory and a 2.5 s stall to return 9."""
    values = {
        "workspace_id": workspace_id,
        "session_id": session_id,
        "after_seq": after_seq,
        "limit": limit,
        "budget": size.budget,
        "per_column": size.per_column,
        "per_json_byte": size.per_json_byte,
    }
    rows = (await conn.execute(_page_statement(after_seq is not None, reverse), values)).mappings().all()
    return MessagePage(rows, bool(rows) and rows[0]["walked"] > len(rows))


@functools.cache
def _page_statement(after: bool, reverse: bool):
    """The page's rows, each with `walked`: how many messages were sized, one more than the page holds when
    it was cut for bytes. The walk takes one message at a time by the session's seq index and stops at the
    first that does not fit: sizing a page's every candidate at once took Postgres 2.5 s for 1,000 rows of
    60 KB metadata (each written out as JSON) to keep 7; the walk costs 15 µs a row."""
    first = _next_message(bindparam("after_seq") if after else None, reverse).subquery("first")
    walk = select(first.c.seq, literal(1, BigInteger).label("n"), first.c.bytes.label("total"))
    walk = walk.cte("walk", recursive=True)
    following = _next_message(walk.c.seq, reverse).lateral("following")
    walk = walk.union_all(
        select(following.c.seq, walk.c.n + 1, walk.c.total + following.c.bytes)
        .select_from(walk)
        .join(following, literal(True))
        .where(walk.c.n < bindparam("limit"), _on_page(walk))
    )
    c = messages.c
    walked = select(func.count()).select_from(walk).scalar_subquery()
    return (
        select(*MESSAGE_COLUMNS, walked.label("walked"))
        .join_from(
            walk,
            messages,
            and_(
                c.workspace_id == bindparam("workspace_id"),
                c.session_id == bindparam("session_id"),
                c.seq == walk.c.seq,
            ),
        )
        .where(_on_page(walk))
        .order_by(walk.c.n)
    )


def _next_message(after_seq, reverse: bool):
    """(seq, bytes) of the session's message next after `after_seq` in page order (without one, its first)."""
    m = messages.alias("m")
    stmt = select(m.c.seq, _reply_bytes(m).label("bytes")).where(
        m.c.workspace_id == bindparam("workspace_id"), m.c.session_id == bindparam("session_id")
    )
    if after_seq is not None:
        stmt = stmt.where(m.c.seq < after_seq if reverse else m.c.seq > after_seq)
    return stmt.order_by(m.c.seq.desc() if reverse else m.c.seq).limit(1)


def _on_page(walk):
    """A walked message is on the page: the first, or within the budget with all those before it."""
    return or_(walk.c.n == 1, walk.c.total <= bindparam("budget", type_=BigInteger))


def _reply_bytes(t):
    """ReplyBytes' bound of a row of MESSAGE_COLUMNS of message table (or alias) `t`. Its JSON is counted as
    Postgres writes it (spaced, numbers in full), at least 3 bytes a value: per_json_byte of them still
    hold a value's Struct (11 bytes at most for a number)."""
    columns = [t.c[column.name] for column in MESSAGE_COLUMNS]
    texts = [func.coalesce(func.octet_length(c), 0) for c in columns if isinstance(c.type, Text)]
    json = [func.octet_length(cast(c, Text)) for c in columns if isinstance(c.type, JSONB)]
    per_column, per_json_byte = (bindparam(name, type_=BigInteger) for name in ("per_column", "per_json_byte"))
    return (
        len(columns) * per_column
        + functools.reduce(operator.add, texts)
        + per_json_byte * functools.reduce(operator.add, json)
    )


async def messages_by_id(conn: AsyncConnection, workspace_id: str, message_ids: Sequence[str]) -> dict[str, RowMapping]:
    """The workspace's messages among `message_ids`, by id (unknown ids are absent)."""
    stmt = select(*MESSAGE_COLUMNS).where(
        messages.c.workspace_id == workspace_id, messages.c.message_id.in_(sorted(set(message_ids)))
    )
    return {r["message_id"]: r for r in (await conn.execute(stmt)).mappings()}


async def messages_with_origins(
    conn: AsyncConnection, workspace_id: str, message_ids: Sequence[str]
) -> dict[str, RowMapping]:
    """As `messages_by_id`, each with where it was first sent if it is a copy (as `message` gives it)."""
    return {
        r["message_id"]: r
        for r in (
            await conn.execute(
                _with_origin().where(
                    messages.c.workspace_id == workspace_id, messages.c.message_id.in_(sorted(set(message_ids)))
                )
            )
        ).mappings()
    }


def as_of_bound(t, as_of) -> list:
    """The messages of message table (or alias) `t` there at `as_of` (a time or a bound parameter), declared
    once for every read as of a time: sent before it and recorded by then. created_at alone is not enough:
    the client may set it (a backfill) and a clone's copies keep their original's."""
    return [t.c.created_at < as_of, t.c.recorded_at <= as_of]


def seen_while_member(t, observer):
    """The perspective rule, declared once: a condition on rows of message table (or alias) `t` that
    `observer` (a peer id or a bound parameter) could see them, i.e. they were appended while it was a
    member of their session, in log order (after its join, not after its leave): the rule the router
    perceives by. Every read of messages under a perspective uses it."""
    m, ms = t.c, memberships.c
    return (
        select(literal(1))
        .where(
            ms.workspace_id == m.workspace_id,
            ms.session_id == m.session_id,
            ms.peer_id == observer,
            ms.joined_after_seq < m.seq,
            ms.left_after_seq.is_(None) | (m.seq <= ms.left_after_seq),
        )
        .exists()
    )


async def seen_by(conn: AsyncConnection, workspace_id: str, observer_id: str, message_ids: Sequence[str]) -> set[str]:
    """The given messages that `observer_id` could see: sent while it was a member of their session."""
    m = messages.c
    stmt = select(m.message_id).where(
        m.workspace_id == workspace_id, m.message_id.in_(list(message_ids)), seen_while_member(messages, observer_id)
    )
    return set((await conn.scalars(stmt)).all())
