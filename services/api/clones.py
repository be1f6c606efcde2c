"""CloneSession: a new session holding copies of a session's messages, each naming where it was first sent."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import RowMapping

from projections import configurations, message_reads, session_reads
from projections.configurations import parsed
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.entry_room import check_message_ids
from services.api.guards import require_session
from services.api.jsonb import as_logged, json_bytes
from services.api.writes import Written, commit
from services.errors import AlreadyExists, FailedPrecondition, NotFound
from services.events import (
    Configuration,
    Event,
    MemberJoined,
    MemberLeft,
    MessageAppended,
    MessageOrigin,
    ProducerInfo,
    SessionConfigured,
    SessionCreated,
    new_id,
)

MAX_CLONED_MESSAGES = 10_000  # one transaction on the log; a longer session is cloned up to a message
# and its bytes: 10,000 copies of 25,000 four-byte characters are 1 GB, past the producer's queue (the clone
# failed UNAVAILABLE every time, with the writes grouped into its transaction)
MAX_CLONED_BYTES = 64 * 1024 * 1024
# and its events, copies, joins, leaves and session levels together: each is a record of the one transaction,
# and past the producer's queue (100,000 records) the clone failed UNAVAILABLE on every retry
MAX_CLONED_EVENTS = 50_000


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


@dataclass(frozen=True)
class Source:
    """What a clone copies from its source session: its messages up to the cut (seq order) with their own
    levels and origins, and the membership periods and session levels that came among them."""

    metadata: dict
    messages: Sequence[RowMapping]
    periods: Sequence[RowMapping]  # memberships rows: a join, and a leave if any, each placed by message seq
    session_levels: Sequence[RowMapping]  # configurations rows of the session level, in log order
    message_levels: Mapping[str, tuple[Configuration | None, Configuration | None]]  # own, workspace stamp
    origins: Mapping[str, RowMapping]
    whole: bool  # no cut: what came after the last message comes too


def _period_changes(src: Source, w: str, s: str, producer: ProducerInfo) -> list[tuple[int, datetime, Event]]:
    """Each peer's joins and leaves, placed by (message seq, time), in the order they can only have come
    in: a period's join before its leave, before the next period's join. Their times are the clocks of
    the API processes that took them, which need not agree: a leave taken by a process whose clock runs
    behind the joining one's would otherwise sort first, and the peer would stay a member of the clone."""
    changes: list[tuple[int, datetime, Event]] = []
    by_peer: dict[str, list[RowMapping]] = {}
    for p in src.periods:
        by_peer.setdefault(p["peer_id"], []).append(p)
    for peer, periods in by_peer.items():
        who = dict(workspace_id=w, session_id=s, peer_id=peer, producer=producer)
        floor: tuple[int, datetime] | None = None
        for p in sorted(periods, key=_period_order):
            joined = MemberJoined(
                **who, observe_me=p["observe_me"], observe_others=p["observe_others"], joined_at=p["joined_at"]
            )
            steps = [((p["joined_after_seq"], p["joined_at"]), joined)]
            if p["left_after_seq"] is not None:
                steps.append(((p["left_after_seq"], p["left_at"]), MemberLeft(**who, left_at=p["left_at"])))
            for place, event in steps:
                floor = place if floor is None else max(place, floor)
                changes.append((*floor, event))
    return changes


def _period_order(p: RowMapping) -> tuple[int, float, datetime]:
    # periods of one peer do not overlap in log order: of two joined after the same message, the one that
    # ended sooner (the open one last) came first; the time decides only between two ended alike
    left = p["left_after_seq"]
    return p["joined_after_seq"], math.inf if left is None else left, p["joined_at"]


def _changes(src: Source, w: str, s: str, producer: ProducerInfo) -> list[tuple[int, datetime, Event]]:
    """The source's joins, leaves and session levels, each with the seq of the message it came after."""
    changes = _period_changes(src, w, s, producer)
    for row in src.session_levels:
        level = SessionConfigured(
            workspace_id=w, session_id=s, configuration=parsed(row["configuration"]), producer=producer
        )
        changes.append((row["after_seq"] or 0, row["recorded_at"], level))
    changes.sort(key=lambda c: (c[0], c[1]))  # stable: a peer's changes of one place keep their order
    if src.whole or not src.messages:
        return changes
    cut = sum(1 for c in changes if c[0] < src.messages[-1]["seq"])  # nothing after the cut message: a prefix
    return changes[:cut] + _gone_since(changes[:cut], changes[cut:], src)


def _gone_since(
    kept: Sequence[tuple[int, datetime, Event]], dropped: Sequence[tuple[int, datetime, Event]], src: Source
) -> list[tuple[int, datetime, Event]]:
    """The leaves the cut dropped of peers who are members of the clone but no longer of the source, each
    after the last copy: a peer removed after the cut would otherwise be a member of the clone, and shown
    every new turn there."""
    current = {p["peer_id"] for p in src.periods if p["left_after_seq"] is None}
    members: set[str] = set()
    for _, _, e in kept:
        if isinstance(e, MemberJoined):
            members.add(e.peer_id)
        elif isinstance(e, MemberLeft):
            members.discard(e.peer_id)
    gone = members - current
    leaves = []
    for c in dropped:  # a peer's changes in their order: the first leave ends the period open at the cut
        if isinstance(c[2], MemberLeft) and c[2].peer_id in gone:
            gone.discard(c[2].peer_id)
            leaves.append(c)
    return leaves


def _copy(row: RowMapping, src: Source, w: str, s: str, producer: ProducerInfo, message_id: str) -> MessageAppended:
    own, stamp = src.message_levels.get(row["message_id"], (None, None))
    return MessageAppended(
        workspace_id=w,
        session_id=s,
        message_id=message_id,
        peer_id=row["peer_id"],
        author_name=row["author_name"] or "",  # as the author was named when it was sent
        content=row["content"],
        created_at=row["created_at"],
        metadata=as_logged(row["metadata"]),
        # the levels the source's processors read it under, so a copy is no more exposed than its original
        configuration=own,
        workspace_configuration=stamp,
        origin=origin(row, src.origins),
        producer=producer,
    )


def clone_events(r: CloneRequest, src: Source, producer: ProducerInfo, new_id: Callable[[], str]) -> list[Event]:
    """The new session, then the source's history replayed in its order: each join, leave and session
    level among the copies where it came among the originals, with the members' own settings. A peer sees
    in the clone what it saw in the source, and no more. FailedPrecondition past MAX_CLONED_EVENTS."""
    w, s = r.workspace_id, r.new_session_id
    events: list[Event] = [SessionCreated(workspace_id=w, session_id=s, metadata=src.metadata, producer=producer)]
    changes = _changes(src, w, s, producer)
    i = 0
    for row in src.messages:
        while i < len(changes) and changes[i][0] < row["seq"]:
            events.append(changes[i][2])
            i += 1
        events.append(_copy(row, src, w, s, producer, new_id()))
    events += [c[2] for c in changes[i:]]
    _check_count(r, events)
    return events


def _check_count(r: CloneRequest, events: Sequence[Event]) -> None:
    if len(events) <= MAX_CLONED_EVENTS:
        return
    n = Counter(type(e) for e in events)
    raise FailedPrecondition(
        f"cloning session {r.session_id!r} takes {len(events)} events, over the {MAX_CLONED_EVENTS} one write may "
        f"hold: {n[MemberJoined] + n[MemberLeft]} joins and leaves of its membership periods and "
        f"{n[SessionConfigured]} session configurations besides its {n[MessageAppended]} messages; "
        "clone it up to an earlier message (up_to_message_id): those after it are left out"
    )


def _check(r: CloneRequest) -> None:
    v.check_id("new_session_id", r.new_session_id)
    check_message_ids(r.workspace_id, r.new_session_id, [])  # the copies' ids, as peerlog assigns them
    if r.up_to_message_id:
        v.check_id("up_to_message_id", r.up_to_message_id)


def _bytes(row: RowMapping) -> int:
    """What a message's copy weighs on the log, near enough: its text and its metadata."""
    return len(row["content"].encode()) + len(json_bytes(row["metadata"]))


async def _source(conn, r: CloneRequest, metadata: dict) -> Source:
    rows = await message_reads.list_messages(conn, r.workspace_id, r.session_id, None, MAX_CLONED_MESSAGES + 1, False)
    try:
        rows = up_to(rows, r.up_to_message_id)
    except NotFound:
        # not among the first messages read: a message of the session further on is past the limit, not unknown
        found = await message_reads.message(conn, r.workspace_id, r.up_to_message_id)
        if len(rows) <= MAX_CLONED_MESSAGES or found is None or found["session_id"] != r.session_id:
            raise
    if len(rows) > MAX_CLONED_MESSAGES:
        raise FailedPrecondition(
            f"session {r.session_id!r} has over {MAX_CLONED_MESSAGES} messages; clone it up to a message (up_to_message_id)"
        )
    if sum(_bytes(row) for row in rows) > MAX_CLONED_BYTES:
        raise FailedPrecondition(
            f"session {r.session_id!r} holds over {MAX_CLONED_BYTES // (1024 * 1024)} MiB of messages to copy; "
            "clone it up to a message (up_to_message_id)"
        )
    ids = [row["message_id"] for row in rows]
    return Source(
        metadata=metadata,
        messages=rows,
        periods=(await session_reads.memberships_of(conn, r.workspace_id, [r.session_id]))[r.session_id],
        session_levels=await configurations.session_changes(conn, r.workspace_id, r.session_id),
        message_levels=await configurations.messages_levels(conn, r.workspace_id, ids),
        origins=await message_reads.origins(conn, r.workspace_id, ids),
        whole=not r.up_to_message_id,
    )


async def clone_session(ctx: ApiDeps, r: CloneRequest, token: str = "") -> tuple[Written, list[str]]:
    """Create the clone and answer once it is readable: the session and the copies' ids."""
    _check(r)
    # the caller's writes to the source first: a clone read from a projection behind them would miss them
    await ctx.freshness.wait(token)
    source = await require_session(ctx, r.workspace_id, r.session_id)
    async with ctx.exclusive("session", r.workspace_id, r.new_session_id):
        async with ctx.engine.connect() as conn:
            if await session_reads.session(conn, r.workspace_id, r.new_session_id) is not None:
                raise AlreadyExists(
                    f"session {r.new_session_id!r} already exists in workspace {r.workspace_id!r}; "
                    "a clone goes into a new session"
                )
            src = await _source(conn, r, as_logged(dict(source["metadata"])))
        events = clone_events(r, src, ctx.producer, new_id)
        written = await commit(ctx, events)
    written = Written(await require_session(ctx, r.workspace_id, r.new_session_id), True, written)
    return written, [e.message_id for e in events if isinstance(e, MessageAppended)]
