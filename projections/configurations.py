"""The configuration levels: projected from their events, and read back as they were at a time or a message."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import Connection, RowMapping, bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.inserts import insert_new
from projections.log_time import after
from projections.schema import configurations, messages
from services.events import Configuration, MessageAppended, MessageConfigured, SessionConfigured, WorkspaceConfigured

c = configurations.c


def _row(
    e,
    level: str,
    configuration: Configuration | None,
    session_id: str = "",
    message_id: str = "",
    after_seq: int | None = None,
    stamped: Configuration | None = None,
) -> dict:
    dump = lambda x: x.model_dump(mode="json", exclude_none=True) if x is not None else None
    return dict(
        event_id=e.event_id,
        workspace_id=e.workspace_id,
        level=level,
        session_id=session_id,
        message_id=message_id,
        configuration=dump(configuration),
        workspace_configuration=dump(stamped),
        after_seq=after_seq,
        recorded_at=e.occurred_at,
    )


def workspace_configured(conn: Connection, events: Sequence[WorkspaceConfigured]) -> None:
    """Each workspace level timed after the one before it (log_time.py): reads, and the stamp every message
    accepted after it carries, take the latest by time. Stamped by a host whose clock ran behind, a level set
    later read as overridden, and messages went on carrying the one it replaced (reasoning on, after off)."""
    insert_new(conn, configurations, _in_log_order(conn, [_row(e, "workspace", e.configuration) for e in events]))


def session_configured(conn: Connection, events: Sequence[SessionConfigured], last_seq) -> None:
    """Each session level timed after the one before it (log_time.py), as the processors apply them: two
    sets raced, or came from hosts whose clocks differ, and reads showed the level the processors overrode."""
    rows = [
        _row(e, "session", e.configuration, e.session_id, after_seq=last_seq(conn, e.workspace_id, e.session_id))
        for e in events
    ]
    insert_new(conn, configurations, _in_log_order(conn, rows))


def _in_log_order(conn: Connection, rows: list[dict]) -> list[dict]:
    """`rows` (one level's, in log order) with each `recorded_at` after its scope's row before it."""
    latest: dict[tuple[str, str, str, str], datetime | None] = {}
    for row in rows:
        key = (row["workspace_id"], row["level"], row["session_id"], row["message_id"])
        if key not in latest:
            latest[key] = _latest_time(conn, *key)
        row["recorded_at"] = latest[key] = after(latest[key], row["recorded_at"])
    return rows


def _latest_time(conn: Connection, workspace_id: str, level: str, session_id: str, message_id: str) -> datetime | None:
    newest = select(func.max(c.recorded_at)).where(
        c.workspace_id == workspace_id, c.level == level, c.session_id == session_id, c.message_id == message_id
    )
    if not message_id:
        return conn.scalar(newest)
    # a level set later follows its message on the log, which has no row here if it came with no level;
    # as_of reads "as it came" at the message's own time (GREATEST skips a NULL)
    came = select(messages.c.recorded_at).where(
        messages.c.workspace_id == workspace_id, messages.c.message_id == message_id
    )
    return conn.scalar(select(func.greatest(newest.scalar_subquery(), came.scalar_subquery())))


def messages_configured(conn: Connection, events: Sequence[tuple[MessageAppended, int]]) -> None:
    """The message level and the workspace stamp of new messages (with their seqs) that carry either.
    Each is its message's first row, so its time needs no floor: a level set later is timed after it."""
    insert_new(
        conn,
        configurations,
        [
            _row(e, "message", e.configuration, e.session_id, e.message_id, seq, e.workspace_configuration)
            for e, seq in events
            if e.configuration is not None or e.workspace_configuration is not None
        ],
    )


def message_configured(conn: Connection, events: Sequence[MessageConfigured]) -> None:
    """A message level set after the message: a later row of the message (its workspace stamp stays on the
    first), timed after the message's row before it (log_time.py). Stamped by an API host whose clock ran
    behind, a level set later read as overridden by the one it replaced, now and as of any time."""
    rows = [_row(e, "message", e.configuration, e.session_id, e.message_id) for e in events]
    insert_new(conn, configurations, _in_log_order(conn, rows))


class Levels(NamedTuple):
    workspace: Configuration | None = None
    session: Configuration | None = None
    message: Configuration | None = None


def parsed(raw: dict | None) -> Configuration | None:
    """A stored configuration row's value as the event model (None: the level sets nothing)."""
    return Configuration.model_validate(raw) if raw is not None else None


def _latest_select(level: str, session_id, as_of: bool, before_seq: bool = False):
    """The newest configuration row of a level: the one query every read below shares, its values bound
    (`workspace_id`, and `as_of` / `before_seq` when asked for), so each shape is built once."""
    stmt = select(c.configuration).where(
        c.workspace_id == bindparam("workspace_id"), c.level == level, c.session_id == session_id
    )
    if as_of:
        stmt = stmt.where(c.recorded_at <= bindparam("as_of"))
    if before_seq:  # log order within the session, not the API's clock
        stmt = stmt.where(c.after_seq < bindparam("before_seq"))
    return stmt.order_by(c.recorded_at.desc(), c.event_id.desc()).limit(1)


@functools.cache
def _latest_statement(level: str, as_of: bool, before_seq: bool):
    return _latest_select(level, bindparam("session_id"), as_of, before_seq)


async def _latest(
    conn: AsyncConnection,
    workspace_id: str,
    level: str,
    session_id: str,
    as_of: datetime | None,
    before_seq: int | None = None,
) -> Configuration | None:
    stmt = _latest_statement(level, as_of is not None, before_seq is not None)
    values = {"workspace_id": workspace_id, "session_id": session_id, "as_of": as_of, "before_seq": before_seq}
    return parsed(await conn.scalar(stmt, values))


def workspace_level_now():
    """The workspace level's newest row (bound `workspace_id`) as a scalar subquery, for a read that
    gathers it with other facts in one round trip (append_reads.py); `parsed` reads its value."""
    return _latest_select("workspace", "", False).scalar_subquery()


@functools.cache
def _levels_statement(as_of: bool):
    """Both levels' latest rows in one round trip: GetContext reads them at every call, and building the
    two selects anew cost it more CPU than running them."""
    return select(
        _latest_select("workspace", "", as_of).scalar_subquery(),
        _latest_select("session", bindparam("session_id"), as_of).scalar_subquery(),
    )


async def levels(
    conn: AsyncConnection, workspace_id: str, session_id: str = "", as_of: datetime | None = None
) -> Levels:
    """The workspace and session levels in force at `as_of` (None: now); no session level without a
    session (no session row has an empty id)."""
    values = {"workspace_id": workspace_id, "session_id": session_id, "as_of": as_of}
    workspace, session = (await conn.execute(_levels_statement(as_of is not None), values)).one()
    return Levels(parsed(workspace), parsed(session))


async def message_levels(
    conn: AsyncConnection, workspace_id: str, message_id: str, as_of: datetime | None = None, session_id: str = ""
) -> Levels | None:
    """The levels in force for one message (None: no such message then, or not in `session_id` when given): the
    workspace's and the session's as the processors saw them when it came, and its own as last set by `as_of`
    (None: now)."""
    m = (
        await conn.execute(
            select(messages.c.session_id, messages.c.seq, messages.c.recorded_at).where(
                messages.c.workspace_id == workspace_id, messages.c.message_id == message_id
            )
        )
    ).first()
    if m is None or (session_id and m.session_id != session_id) or (as_of is not None and m.recorded_at > as_of):
        return None  # as of a time before it was recorded, it did not exist
    rows = (
        await conn.execute(
            select(c.configuration, c.workspace_configuration, c.recorded_at)
            .where(c.workspace_id == workspace_id, c.level == "message", c.message_id == message_id)
            .order_by(c.recorded_at, c.event_id)
        )
    ).all()
    stamp = next((r.workspace_configuration for r in rows if r.workspace_configuration is not None), None)
    own = [r.configuration for r in rows if as_of is None or r.recorded_at <= as_of]
    session = await _latest(conn, workspace_id, "session", m.session_id, None, before_seq=m.seq)
    return Levels(parsed(stamp), session, parsed(own[-1]) if own else None)


async def session_changes(conn: AsyncConnection, workspace_id: str, session_id: str) -> Sequence[RowMapping]:
    """The session level's every setting in log order: `configuration`, and `after_seq`, the session's last
    message seq when it was applied (it governs the messages after that one)."""
    stmt = (
        select(c.configuration, c.after_seq, c.recorded_at)
        .where(c.workspace_id == workspace_id, c.level == "session", c.session_id == session_id)
        .order_by(c.after_seq, c.recorded_at, c.event_id)
    )
    return (await conn.execute(stmt)).mappings().all()


async def messages_levels(
    conn: AsyncConnection, workspace_id: str, message_ids: Sequence[str]
) -> dict[str, tuple[Configuration | None, Configuration | None]]:
    """For each of `message_ids` that has any: (its own level as last set, the workspace level stamped on it),
    as `message_levels` reads them for one message."""
    stmt = (
        select(c.message_id, c.configuration, c.workspace_configuration)
        .where(c.workspace_id == workspace_id, c.level == "message", c.message_id.in_(list(message_ids)))
        .order_by(c.recorded_at, c.event_id)
    )
    own: dict[str, dict | None] = {}
    stamps: dict[str, dict | None] = {}
    for r in (await conn.execute(stmt)).mappings():
        own[r["message_id"]] = r["configuration"]
        if stamps.get(r["message_id"]) is None:
            stamps[r["message_id"]] = r["workspace_configuration"]
    return {i: (parsed(own[i]), parsed(stamps.get(i))) for i in own}
