"""Write use cases: check (guards.py) against the projections, then append events atomically.

Control-plane writes (workspaces, peers, sessions, membership) wait until they are readable before
answering, so the next call can rely on them; AddMessages answers at the durable ack.

Racing control-plane writes (issue 17 §2.1, §2.13): the check against the projection and the append run
under a per-entity lock (`ApiDeps.exclusive`: in-process, and a Postgres advisory lock across API
processes), so a second caller sees the first one's write. Unserialised across processes, both were
told they created a session, a losing create's configuration was applied, and two clones were copied
into one session. Should two appends of one entity still reach the log (a lock holder whose wait for the
projector timed out), the projection decides in log order: the first create wins (a caller was
`created` only if the projected row is its own event) and a MemberJoined for a peer with an open period
is ignored (projections/handlers.py, and the router does the same).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import RowMapping

from projections import append_reads, configurations, message_reads, peer_reads, session_reads, workspace_reads
from projections.append_reads import AppendFacts
from services.api import auth, idempotency
from services.api import validation as v
from services.api.deps import WRITTEN_UNDER_LOCK, ApiDeps
from services.api.entry_room import check_member_ids, check_message_ids
from services.api.freshness import abandoned, answered_in_time, begin_append, until_projected
from services.api.guards import (
    check_members,
    check_peer_ids,
    check_scope,
    require_scope,
    require_session,
    require_workspace,
    validate_messages,
)
from services.api.locks import NotGranted, held, shared, started
from services.api.unconfirmed import appended
from services.bus.consistency import ConsistencyToken
from services.errors import AlreadyExists, FailedPrecondition, InvalidArgument, Unavailable
from services.events import (
    Configuration,
    Event,
    MemberJoined,
    MemberLeft,
    MessageAppended,
    PeerConfigured,
    PeerCreated,
    PeerMetadataSet,
    SessionConfigured,
    SessionCreated,
    WorkspaceConfigured,
    WorkspaceCreated,
    new_id,
)
from services.events.requests import KeyedRequest


@dataclass(frozen=True)
class MemberSpec:
    peer_id: str
    observe_me: bool | None = None
    observe_others: bool | None = None  # None: the configuration's


@dataclass(frozen=True)
class NewMessage:
    peer_id: str
    content: str
    created_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    message_id: str = ""  # the client's; empty: peerlog assigns one
    configuration: Configuration | None = None  # the message level of the configuration hierarchy


async def _within(ctx: ApiDeps, appending: Awaitable[ConsistencyToken]) -> ConsistencyToken:
    """The append's positions, or UNAVAILABLE once the consistency wait is over (it may still land)."""
    try:
        return await asyncio.wait_for(appending, ctx.freshness.timeout_s)
    except TimeoutError:
        raise Unavailable(
            f"the write may be on the log: the log had not said after {ctx.freshness.timeout_s:g} s whether its "
            "commit went through; read it back, or send it again only as it was"
        ) from None


@dataclass(frozen=True)
class Written:
    row: RowMapping
    created: bool
    token: str


async def commit(ctx: ApiDeps, events: Sequence[Event], wait: bool = True, admit: bool = True) -> str:
    """Append `events` in one transaction; with `wait`, return only once they are readable, else once the
    projector is close behind them (services/api/backpressure.py), or at once without `admit` (the caller
    then admits the token itself)."""
    if not events:
        return ""
    attempt = begin_append()  # a caller told nothing was written (answered_in_time) is not written to later
    written = WRITTEN_UNDER_LOCK.get()
    if written is None:
        # an unconfirmed commit: a write holding locks (under answered_in_time, which bounds its answer) waits
        # for its outcome however long; a plain one answers within the consistency wait, known or not
        token = await appended(ctx.log, events, None if attempt is not None else ctx.freshness.timeout_s)
    else:
        # the lock around it waits for this append however the caller ends: cancelled (a deadline) once
        # the append began, the write still lands; and its caller's answer waits at most the consistency wait
        appending = started(appended(ctx.log, events))
        written.append(appending)
        token = await _within(ctx, asyncio.shield(appending))
    if attempt is not None:
        attempt.appended = True  # its caller may now be told it is on the log
    if not wait:
        if admit:
            await ctx.backpressure.admit(token)
        return token.encode()
    try:
        await ctx.freshness.wait(token)
    except Unavailable:
        raise Unavailable(
            f"the write is on the log but not readable after {ctx.freshness.timeout_s:g} s (the projector may "
            "be behind); it stands: read it back once readable rather than sending it again"
        ) from None
    return token.encode()


async def _workspace_now(ctx: ApiDeps, workspace_id: str) -> RowMapping | None:
    async with ctx.engine.connect() as conn:
        return await workspace_reads.workspace(conn, workspace_id)


async def get_or_create_workspace(
    ctx: ApiDeps, workspace_id: str, metadata: dict, configuration: Configuration | None = None
) -> Written:
    v.check_id("workspace_id", workspace_id)
    v.check_metadata("metadata", metadata)
    row = await _workspace_now(ctx, workspace_id)
    if row is not None:  # a get needs no lock: only a create takes it, and this one is readable
        return Written(row, False, "")
    async with ctx.exclusive("workspace", workspace_id):
        row = await _workspace_now(ctx, workspace_id)
        if row is not None:
            return Written(row, False, "")
        event = WorkspaceCreated(workspace_id=workspace_id, metadata=metadata, producer=ctx.producer)
        configured = (
            [WorkspaceConfigured(workspace_id=workspace_id, configuration=configuration, producer=ctx.producer)]
            if configuration
            else []
        )
        token = await commit(ctx, [event, *configured])
    row = await require_workspace(ctx, workspace_id)
    return Written(row, row["event_id"] == event.event_id, token)


async def get_or_create_peer(
    ctx: ApiDeps, workspace_id: str, peer_id: str, observe_me: bool | None, metadata: dict
) -> Written:
    v.check_id("peer_id", peer_id)
    v.check_metadata("metadata", metadata)
    v.check_peer_name("metadata", metadata)
    await require_workspace(ctx, workspace_id)
    async with ctx.engine.connect() as conn:
        before = await peer_reads.peer(conn, workspace_id, peer_id)
    if (
        before is not None
        and observe_me in (None, before["observe_me"])
        and await ctx.unheld("peer", workspace_id, peer_id)
    ):
        return Written(before, False, "")  # a get that changes nothing, with no write of the peer pending
    async with ctx.exclusive("peer", workspace_id, peer_id):
        async with ctx.engine.connect() as conn:
            before = await peer_reads.peer(conn, workspace_id, peer_id)
        events: list[Event] = []
        if before is None:
            events.append(
                PeerCreated(
                    workspace_id=workspace_id,
                    peer_id=peer_id,
                    metadata=metadata,
                    observe_me=True if observe_me is None else observe_me,
                    producer=ctx.producer,
                )
            )
        elif observe_me is not None and observe_me != before["observe_me"]:
            events.append(
                PeerConfigured(workspace_id=workspace_id, peer_id=peer_id, observe_me=observe_me, producer=ctx.producer)
            )
        token = await commit(ctx, events)
    async with ctx.engine.connect() as conn:
        row = await peer_reads.peer(conn, workspace_id, peer_id)
    return Written(row, before is None and row["event_id"] == events[0].event_id, token)


async def set_peer_metadata(ctx: ApiDeps, workspace_id: str, peer_id: str, metadata: dict) -> Written:
    """Replace an existing peer's metadata (a PeerMetadataSet event, none when it already reads so), and
    answer once the change is readable: the messages the peer sends after the call carry its new name."""
    v.check_id("workspace_id", workspace_id)
    v.check_id("peer_id", peer_id)
    v.check_metadata("metadata", metadata)
    v.check_peer_name("metadata", metadata)
    async with ctx.exclusive("peer", workspace_id, peer_id):
        async with ctx.engine.connect() as conn:
            await check_scope(conn, workspace_id, peer_id=peer_id)  # NotFound, said as every write says it
            before = await peer_reads.peer(conn, workspace_id, peer_id)
        if same_json(before["metadata"], metadata):
            return Written(before, False, "")
        event = PeerMetadataSet(workspace_id=workspace_id, peer_id=peer_id, metadata=metadata, producer=ctx.producer)
        token = await commit(ctx, [event])
    async with ctx.engine.connect() as conn:
        row = await peer_reads.peer(conn, workspace_id, peer_id)
    return Written(row, False, token)


def _joins(ctx: ApiDeps, workspace_id: str, session_id: str, members: Sequence[MemberSpec]):
    now = datetime.now(UTC)
    return [
        MemberJoined(
            workspace_id=workspace_id,
            session_id=session_id,
            peer_id=m.peer_id,
            observe_me=m.observe_me,
            observe_others=m.observe_others,
            joined_at=now,
            producer=ctx.producer,
        )
        for m in members
    ]


async def _session_now(ctx: ApiDeps, workspace_id: str, session_id: str) -> tuple[RowMapping | None, set[str]]:
    """The session's row as projected (None: none) and its current members."""
    async with ctx.engine.connect() as conn:
        row = await session_reads.session(conn, workspace_id, session_id)
        return row, (await session_reads.current_members(conn, workspace_id, session_id) if row else set())


async def get_or_create_session(
    ctx: ApiDeps,
    workspace_id: str,
    session_id: str,
    metadata: dict,
    members: Sequence[MemberSpec],
    configuration: Configuration | None = None,
) -> Written:
    v.check_id("session_id", session_id)
    v.check_metadata("metadata", metadata)
    await require_workspace(ctx, workspace_id)
    _check_asked(session_id, members)
    await check_members(ctx, workspace_id, [m.peer_id for m in members])
    row, current = await _session_now(ctx, workspace_id, session_id)
    if (
        row is not None
        and all(m.peer_id in current for m in members)
        and await ctx.unheld("session", workspace_id, session_id)
    ):  # a get that changes nothing, with no write of the session pending: no lock
        return Written(await require_session(ctx, workspace_id, session_id), False, "")
    async with ctx.exclusive("session", workspace_id, session_id):
        row, current = await _session_now(ctx, workspace_id, session_id)
        events: list[Event] = []
        if row is None:
            # only a new one: a session made before the check still reads, and takes messages without a vector
            check_message_ids(workspace_id, session_id, [])  # its messages' ids, as peerlog assigns them
            events.append(
                SessionCreated(
                    workspace_id=workspace_id, session_id=session_id, metadata=metadata, producer=ctx.producer
                )
            )
            if configuration:
                events.append(
                    SessionConfigured(
                        workspace_id=workspace_id,
                        session_id=session_id,
                        configuration=configuration,
                        producer=ctx.producer,
                    )
                )
        joining = [m for m in members if m.peer_id not in current]
        _check_joining(workspace_id, session_id, len(current), joining)
        events += _joins(ctx, workspace_id, session_id, joining)
        token = await commit(ctx, events)
    after = await require_session(ctx, workspace_id, session_id)
    return Written(after, row is None and after["event_id"] == events[0].event_id, token)


# current members of a session: the router keeps a session's members in one state record, which Kafka refuses
# past 1 MB (and the router then redid its batch for ever): about 0.6 kB a member at the longest ids, beside
# the two last turns it keeps (cut to 2,000 characters: up to 13 kB each as JSON)
MAX_MEMBERS = 500


def _check_asked(session_id: str, members: Sequence[MemberSpec]) -> None:
    """More members asked for than a session holds never fit: refused before they are looked up (70,000 ids
    passed Postgres's 65,535 parameters, and the error read as the database being down)."""
    if len(members) > MAX_MEMBERS:
        raise FailedPrecondition(
            f"{len(members):,} members asked for session {session_id!r}: a session holds at most {MAX_MEMBERS}"
        )


def _check_joining(workspace_id: str, session_id: str, current: int, joining: Sequence[MemberSpec]) -> None:
    """Room in the session for `joining`, and room for each one's ids in an observation's index entry."""
    # FAILED_PRECONDITION, not RESOURCE_EXHAUSTED: the session's state refuses it until members leave, and
    # clients retry RESOURCE_EXHAUSTED (the memory provider's writer held its queue behind it for good)
    if current + len(joining) > MAX_MEMBERS:
        raise FailedPrecondition(
            f"session {session_id!r} has {current} current member(s) and {len(joining)} would join: a session "
            f"holds at most {MAX_MEMBERS}; remove members first"
        )
    check_member_ids(workspace_id, [m.peer_id for m in joining])


async def add_members(ctx: ApiDeps, workspace_id: str, session_id: str, members: Sequence[MemberSpec]) -> Written:
    if not members:  # OK with nothing written, and a token that names no write, would hide a caller's bug
        raise InvalidArgument("members is empty: name at least one peer to add")
    await require_session(ctx, workspace_id, session_id)
    _check_asked(session_id, members)
    await check_members(ctx, workspace_id, [m.peer_id for m in members])
    async with ctx.exclusive("session", workspace_id, session_id):
        async with ctx.engine.connect() as conn:
            current = await session_reads.current_members(conn, workspace_id, session_id)
        already = [m.peer_id for m in members if m.peer_id in current]
        if already:
            raise AlreadyExists(
                f"peer(s) {v.listed([repr(p) for p in already])} are already members of session {session_id!r}"
            )
        _check_joining(workspace_id, session_id, len(current), members)
        token = await commit(ctx, _joins(ctx, workspace_id, session_id, members))
    return Written(await require_session(ctx, workspace_id, session_id), False, token)


async def remove_members(ctx: ApiDeps, workspace_id: str, session_id: str, peer_ids: Sequence[str]) -> Written:
    if not peer_ids:
        raise InvalidArgument("peer_ids is empty: name at least one member to remove")
    await require_session(ctx, workspace_id, session_id)
    check_peer_ids(peer_ids)
    async with ctx.exclusive("session", workspace_id, session_id):
        async with ctx.engine.connect() as conn:
            current = await session_reads.current_members(conn, workspace_id, session_id)
        absent = [p for p in peer_ids if p not in current]
        if absent:
            raise FailedPrecondition(
                f"peer(s) {v.listed([repr(p) for p in absent])} are not current members of session {session_id!r}"
            )
        now = datetime.now(UTC)
        events = [
            MemberLeft(workspace_id=workspace_id, session_id=session_id, peer_id=p, left_at=now, producer=ctx.producer)
            for p in peer_ids
        ]
        token = await commit(ctx, events)
    return Written(await require_session(ctx, workspace_id, session_id), False, token)


async def add_messages(
    ctx: ApiDeps, workspace_id: str, session_id: str, new: Sequence[NewMessage], idempotency_key: str = ""
) -> tuple[list[str], str]:
    """Append messages atomically; returns their ids and the consistency token. Under a used
    idempotency key, the first call's reply instead (services/api/idempotency.py)."""
    validate_messages(new)
    return await append_checked(ctx, workspace_id, session_id, new, idempotency_key)


async def append_checked(
    ctx: ApiDeps, workspace_id: str, session_id: str, new: Sequence[NewMessage], idempotency_key: str = ""
) -> tuple[list[str], str]:
    """AddMessages' append (atomic; once per idempotency key) of messages already checked, in any number:
    UploadFile's chunks of one file go in one transaction too."""
    # before any read: the hot path's checks run in one statement, which Postgres refuses for an id with
    # a NUL in it (the caller then got INTERNAL)
    v.check_id("workspace_id", workspace_id)
    v.check_id("session_id", session_id)
    if any(m.message_id for m in new):  # a new session's generated ids fit (get_or_create_session)
        check_message_ids(workspace_id, session_id, [m.message_id for m in new if m.message_id])
    if idempotency_key and auth.narrow_view(workspace_id) is not None:
        # a key's first use answers before any check: to a peer token, a session it never joined is missing
        await require_scope(ctx, workspace_id, [session_id])
    keyed = idempotency.keyed(workspace_id, (workspace_id, session_id), idempotency_key, new)
    return await idempotency.once(
        ctx, keyed, lambda request: _append_messages(ctx, workspace_id, session_id, new, request)
    )


async def _append_messages(
    ctx: ApiDeps, workspace_id: str, session_id: str, new: Sequence[NewMessage], request: KeyedRequest | None
) -> tuple[list[str], str]:
    chosen = sorted({m.message_id for m in new if m.message_id})
    if not chosen:  # the hot path: the checks in one statement (the session row implies its workspace)
        gone = asyncio.Event()
        work = started(_shared_append(ctx, workspace_id, session_id, new, request, gone.is_set))
        try:
            # run to its end: cancelled (a deadline) while its append ran, it let the session's lock go
            # first, and a RemoveMembers queued behind could land its leave before the message
            ids, token = await asyncio.shield(work)
        except asyncio.CancelledError:
            gone.set()  # still waiting for the lock, it stops; appending, it ends as it would have
            raise
        # slowed to the projector's pace with the lock and its connection let go: held, the writers waiting
        # took the connections the pace is read with (ingest ran 11 % slower)
        if token:
            await ctx.backpressure.admit(ConsistencyToken.decode(token))
        return ids, token
    claim = _claimed_append(ctx, workspace_id, session_id, new, request, chosen)
    return await answered_in_time(
        ctx.freshness,
        claim,
        f"the write of message id(s) {v.listed(chosen)}",
        "it stands: send it again only under an idempotency key (to get its reply), since its ids are now taken",
        keyed=request is not None,
    )


async def _shared_append(
    ctx: ApiDeps,
    workspace_id: str,
    session_id: str,
    new: Sequence[NewMessage],
    request: KeyedRequest | None,
    gone: Callable[[], bool],
) -> tuple[list[str], str]:
    """The session's members checked and the messages appended under the session's lock, shared: a
    RemoveMembers between the two (its leave on the log first) left an acknowledged message no one
    perceived, its author a member no more where it landed. Answered at the ack (the caller keeps the pace).
    The lock waited for at most the consistency wait: a member change holds it until it is readable, and a
    post waited for it without end (the client's deadline then said "may be committed", with nothing written)."""
    try:
        lock = shared(
            ctx.engine, ("session", workspace_id, session_id), lambda: gone() or abandoned(), ctx.freshness.timeout_s
        )
        async with lock as conn:
            facts = await append_reads.append_facts(conn, workspace_id, session_id, (m.peer_id for m in new))
            return await _checked_append(ctx, facts, {}, workspace_id, session_id, new, request)
    except NotGranted:
        raise Unavailable(
            f"the write of {len(new)} message(s) to session {session_id!r} appended nothing: after "
            f"{ctx.freshness.timeout_s:g} s it still waited for a change of the session's members, not yet readable "
            "(the projector may be behind); send it again"
        ) from None


async def _claimed_append(
    ctx: ApiDeps,
    workspace_id: str,
    session_id: str,
    new: Sequence[NewMessage],
    request: KeyedRequest | None,
    chosen: Sequence[str],
) -> tuple[list[str], str]:
    """The append of messages with ids the client chose, held (locks.held), held until
    readable however long that takes. Unclaimed, or let go before, two writes of one id were both
    acknowledged and the projector kept one."""
    async with held(ctx.engine, [("message", workspace_id, i) for i in chosen], abandoned):
        async with shared(ctx.engine, ("session", workspace_id, session_id), abandoned) as conn:
            facts = await append_reads.append_facts(conn, workspace_id, session_id, (m.peer_id for m in new))
            taken = await message_reads.messages_by_id(conn, workspace_id, chosen)
            if taken:  # what each was sent with, for telling a resend of the same call (sent_before)
                own = await configurations.messages_levels(conn, workspace_id, list(taken))
                taken = {i: {**row, "configuration": own.get(i, (None, None))[0]} for i, row in taken.items()}
            # no pace to keep: it waits below until it is readable
            ids, token = await _checked_append(ctx, facts, taken, workspace_id, session_id, new, request)
        await until_projected(ctx.freshness, token)
        return ids, token


def _set(configuration: Configuration | None) -> dict:
    return configuration.model_dump(exclude_none=True) if configuration is not None else {}


def same_json(stored: Any, sent: Any) -> bool:
    """Whether a value read back from a jsonb column is the one `sent` to it, compared as jsonb compares.
    Python's == is not that: a float such as 1.7336000001234568e+18 is stored as the decimal it prints
    as, which reads back as the int 1733600000123456800, and that differs from the float's exact value."""
    return _as_jsonb(stored) == _as_jsonb(sent)


def _as_jsonb(value: Any) -> Any:
    # a float's shortest digits, as the write sends them, kept exact; in a tuple, as True == 1 in Python
    return json.loads(json.dumps(value), parse_float=_number, parse_int=_number)


def _number(text: str) -> tuple[Decimal]:
    return (Decimal(text),)


def sent_before(taken: Mapping[str, Any], session_id: str, new: Sequence[NewMessage]) -> bool:
    """Whether `new` is an earlier call sent again as it was: every message has its own id, already written
    to this session by the same author with the same content and metadata (and created_at, when the call
    gave one). A call that timed out while its append ran is told to do just that; it got ALREADY_EXISTS,
    the answer to a clash with someone else's message, and never learnt that its write had landed."""

    def same(m: NewMessage) -> bool:
        row = taken.get(m.message_id)
        return (
            row is not None
            and (row["session_id"], row["peer_id"], row["content"]) == (session_id, m.peer_id, m.content)
            and same_json(row["metadata"], m.metadata)
            and (m.created_at is None or row["created_at"] == m.created_at)
            and _set(row.get("configuration")) == _set(m.configuration)  # an opt-out added is no resend
        )

    return all(m.message_id and same(m) for m in new)


async def _checked_append(
    ctx: ApiDeps,
    facts: AppendFacts,
    taken: Mapping[str, Any],
    workspace_id: str,
    session_id: str,
    new: Sequence[NewMessage],
    request: KeyedRequest | None,
) -> tuple[list[str], str]:
    """The append after its checks (`facts` of the session and authors, the chosen ids `taken`), answered at
    the ack: the caller keeps the projector's pace, or waits until it is readable, after its lock."""
    outsiders = sorted({m.peer_id for m in new if m.peer_id not in facts.members})
    if not facts.session_exists or (outsiders and auth.narrow_view(workspace_id) is not None):
        # says which is missing, or what is malformed; to a peer token, a session it never joined is missing
        await require_scope(ctx, workspace_id, [session_id])
    if taken and sent_before(taken, session_id, new):
        return [m.message_id for m in new], ""  # readable already: a read needs no token to see them
    if taken:
        raise AlreadyExists(
            f"message id(s) {v.listed([repr(i) for i in sorted(taken)])} already exist in "
            f"workspace {workspace_id!r}; a client's message ids must be new, or the whole earlier call sent "
            "again unchanged (every message with its id, author, content, metadata and created_at) to get its ids back"
        )
    if outsiders:
        await check_members(ctx, workspace_id, outsiders)  # unknown peers are NOT_FOUND
        raise FailedPrecondition(
            f"peer(s) {v.listed([repr(p) for p in outsiders])} are not members of session {session_id!r}; "
            "add them with AddMembers before they post"
        )
    now = datetime.now(UTC)
    events = [
        MessageAppended(
            workspace_id=workspace_id,
            session_id=session_id,
            message_id=m.message_id or new_id(),
            peer_id=m.peer_id,
            content=m.content,
            created_at=m.created_at or now,
            metadata=m.metadata,
            producer=ctx.producer,
            author_observe_me=facts.observe_me(m.peer_id),
            author_name=facts.names.get(m.peer_id, ""),
            request=request,
            configuration=m.configuration,
            workspace_configuration=facts.workspace_level,
        )
        for m in new
    ]
    token = await commit(ctx, events, wait=False, admit=False)
    return [e.message_id for e in events], token
