"""CloneSession: a new session holding copies of a session's messages, each naming where it was first sent."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import RowMapping

from projections import message_reads, session_reads
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.guards import require_session
from services.api.writes import Written, commit
from services.errors import AlreadyExists, FailedPrecondition, NotFound
from services.events import Event, MemberJoined, MessageAppended, MessageOrigin, ProducerInfo, SessionCreated, new_id

MAX_CLONED_MESSAGES = 10_000  # one transaction on the log; a longer session is cloned up to a message


@dataclass(frozen=True)
class CloneRequest:
    workspace_id: str
    session_id: str
    new_session_id: str
    up_to_message_id: str = ""  # empty: every message


def up_to(rows: Sequence[RowMapping], message_id: str) -> Sequence[RowMapping]:
    """The source's messages (in seq order) up to and including `message_id`; all of them for ""."""
    if not message_id:
        return rows
    for i, row in enumerate(rows):
        if row["message_id"] == message_id:
            return rows[: i + 1]
    raise NotFound(f"up_to_message_id {message_id!r} is not a message of the session")


def origin(row: RowMapping, origins: Mapping[str, RowMapping]) -> MessageOrigin:
    """Where `row` was first sent: its own origin if it is a copy itself, else the row."""
    first = origins.get(row["message_id"])
    if first is not None:
        return MessageOrigin(
            workspace_id=first["origin_workspace_id"],
            session_id=first["origin_session_id"],
            message_id=first["origin_message_id"],
        )
    return MessageOrigin(workspace_id=row["workspace_id"], session_id=row["session_id"], message_id=row["message_id"])


def clone_events(
    r: CloneRequest,
    session_metadata: dict,
    members: Sequence[str],
    rows: Sequence[RowMapping],
    origins: Mapping[str, RowMapping],
    producer: ProducerInfo,
    new_id: Callable[[], str],
    now: datetime,
) -> list[Event]:
    """The new session, its members (joined first, so the copies are theirs to read), then the copies in
    order, keeping each message's author, time and metadata."""
    w, s = r.workspace_id, r.new_session_id
    events: list[Event] = [SessionCreated(workspace_id=w, session_id=s, metadata=session_metadata, producer=producer)]
    events += [
        MemberJoined(workspace_id=w, session_id=s, peer_id=p, joined_at=now, producer=producer) for p in sorted(members)
    ]
    events += [
        MessageAppended(
            workspace_id=w,
            session_id=s,
            message_id=new_id(),
            peer_id=row["peer_id"],
            author_name=row["author_name"] or "",  # as the author was named when it was sent
            content=row["content"],
            created_at=row["created_at"],
            metadata=row["metadata"],
            origin=origin(row, origins),
            producer=producer,
        )
        for row in rows
    ]
    return events


def _check(r: CloneRequest) -> None:
    v.check_id("new_session_id", r.new_session_id)
    if r.up_to_message_id:
        v.check_id("up_to_message_id", r.up_to_message_id)


async def clone_session(ctx: ApiDeps, r: CloneRequest) -> tuple[Written, list[str]]:
    """Create the clone and answer once it is readable: the session and the copies' ids."""
    _check(r)
    source = await require_session(ctx, r.workspace_id, r.session_id)
    async with ctx.exclusive("session", r.workspace_id, r.new_session_id):
        async with ctx.engine.connect() as conn:
            if await session_reads.session(conn, r.workspace_id, r.new_session_id) is not None:
                raise AlreadyExists(
                    f"session {r.new_session_id!r} already exists in workspace {r.workspace_id!r}; "
                    "a clone goes into a new session"
                )
            rows = await message_reads.list_messages(
                conn, r.workspace_id, r.session_id, None, MAX_CLONED_MESSAGES + 1, False
            )
            rows = up_to(rows, r.up_to_message_id)
            if len(rows) > MAX_CLONED_MESSAGES:
                raise FailedPrecondition(
                    f"session {r.session_id!r} has over {MAX_CLONED_MESSAGES} messages; "
                    "clone it up to a message (up_to_message_id)"
                )
            members = await session_reads.current_members(conn, r.workspace_id, r.session_id)
            origins = await message_reads.origins(conn, r.workspace_id, [row["message_id"] for row in rows])
        events = clone_events(
            r,
            dict(source["metadata"]),
            sorted(members),
            rows,
            origins,
            ctx.producer,
            new_id,
            datetime.now(UTC),
        )
        token = await commit(ctx, events)
    written = Written(await require_session(ctx, r.workspace_id, r.new_session_id), True, token)
    return written, [e.message_id for e in events if isinstance(e, MessageAppended)]
