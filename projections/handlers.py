"""One handler per event type. Each applies a run of events of its type in bulk, idempotently."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import (
    Connection,
    and_,
    any_,
    bindparam,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert

from projections import lexicon
from projections.configurations import message_configured, messages_configured, session_configured, workspace_configured
from projections.dream_handlers import DREAM_HANDLERS
from projections.inserts import copy_in, insert_new, take, upsert_latest
from projections.keys import TextArray, among
from projections.memory_handlers import MEMORY_HANDLERS
from projections.schema import (
    ACTIVE_EMBEDDING_MODEL,
    memberships,
    message_origins,
    message_terms,
    messages,
    peers,
    pending_message_embeddings,
    sessions,
    workspaces,
)
from projections.scope_handlers import SCOPE_HANDLERS
from projections.vectors import Vector
from services.events import (
    Event,
    MemberJoined,
    MemberLeft,
    MessageAppended,
    MessageConfigured,
    MessagesEmbedded,
    PeerConfigured,
    PeerCreated,
    PeerMetadataSet,
    SessionConfigured,
    SessionCreated,
    WorkspaceConfigured,
    WorkspaceCreated,
)

Handler = Callable[[Connection, Sequence], None]


def workspace_created(conn: Connection, events: Sequence[WorkspaceCreated]) -> None:
    insert_new(
        conn,
        workspaces,
        [
            dict(workspace_id=e.workspace_id, metadata=e.metadata, created_at=e.occurred_at, event_id=e.event_id)
            for e in events
        ],
    )


def peer_created(conn: Connection, events: Sequence[PeerCreated]) -> None:
    insert_new(
        conn,
        peers,
        [
            dict(
                workspace_id=e.workspace_id,
                peer_id=e.peer_id,
                observe_me=e.observe_me,
                metadata=e.metadata,
                created_at=e.occurred_at,
                event_id=e.event_id,
            )
            for e in events
        ],
    )


def _update_peer(conn: Connection, e: PeerConfigured | PeerMetadataSet, **values) -> None:
    conn.execute(
        update(peers).where(peers.c.workspace_id == e.workspace_id, peers.c.peer_id == e.peer_id).values(**values)
    )


def peer_configured(conn: Connection, events: Sequence[PeerConfigured]) -> None:
    for e in events:
        _update_peer(conn, e, observe_me=e.observe_me)


def peer_metadata_set(conn: Connection, events: Sequence[PeerMetadataSet]) -> None:
    for e in events:
        _update_peer(conn, e, metadata=e.metadata)


def session_created(conn: Connection, events: Sequence[SessionCreated]) -> None:
    insert_new(
        conn,
        sessions,
        [
            dict(
                workspace_id=e.workspace_id,
                session_id=e.session_id,
                metadata=e.metadata,
                created_at=e.occurred_at,
                message_count=0,
                event_id=e.event_id,
            )
            for e in events
        ],
    )


def member_joined(conn: Connection, events: Sequence[MemberJoined]) -> None:
    # a join of a peer whose period is open changes nothing (two API processes racing on one peer can
    # both append one): a second open period would outlive the one MemberLeft that closes the first.
    # The run is checked against the table once and then in order, each join opening its period
    open_now = _open_members(conn, {(e.workspace_id, e.session_id, e.peer_id) for e in events})
    applied = set(conn.scalars(_JOINS_APPLIED, {"ids": [e.event_id for e in events]}))  # a repeated event
    # no message lands between the joins of one run: each session's last seq holds for all of them
    last = _last_seqs(conn, {(e.workspace_id, e.session_id) for e in events})
    rows = []
    for e in events:
        member = (e.workspace_id, e.session_id, e.peer_id)
        if member in open_now or e.event_id in applied:
            continue
        open_now.add(member)
        applied.add(e.event_id)
        rows.append(
            dict(
                joined_event_id=e.event_id,
                workspace_id=e.workspace_id,
                session_id=e.session_id,
                peer_id=e.peer_id,
                observe_me=e.observe_me,
                observe_others=e.observe_others,
                joined_at=e.joined_at,
                left_at=None,
                left_event_id=None,
                joined_after_seq=last.get((e.workspace_id, e.session_id), 0),
                left_after_seq=None,
            )
        )
    insert_new(conn, memberships, rows)


_JOINS_APPLIED = select(memberships.c.joined_event_id).where(
    memberships.c.joined_event_id == any_(bindparam("ids", type_=TextArray()))
)


def _open_members(conn: Connection, members: set[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    """Those of `members` (workspace, session, peer) with an open membership period."""
    m = memberships.c
    key = (m.workspace_id, m.session_id, m.peer_id)
    return set(conn.execute(select(*key).where(among(key, sorted(members)), m.left_event_id.is_(None))).tuples())


def member_left(conn: Connection, events: Sequence[MemberLeft]) -> None:
    # closes the open membership period; a repeated event finds none open and changes nothing
    for e in events:
        conn.execute(
            update(memberships)
            .where(
                memberships.c.workspace_id == e.workspace_id,
                memberships.c.session_id == e.session_id,
                memberships.c.peer_id == e.peer_id,
                memberships.c.left_event_id.is_(None),
            )
            .values(
                left_at=e.left_at,
                left_event_id=e.event_id,
                left_after_seq=_last_seq(conn, e.workspace_id, e.session_id),
            )
        )


def message_appended(conn: Connection, events: Sequence[MessageAppended]) -> None:
    fresh = _unseen(conn, events)
    if not fresh:
        return
    next_seq = _last_seqs(conn, {(e.workspace_id, e.session_id) for e in fresh})
    keys = [(e.workspace_id, e.message_id) for e in fresh]
    # a vector that came first is written with its message, not by an UPDATE after it (a second copy
    # of a 1.7 kB row, its generated column computed again); a rebuild replays the vectors first
    vectors = _take_pending_embeddings(conn, keys)
    # live, a message almost always comes before its vector: then the COPY leaves the vector columns out
    # (NULL) instead of writing three NULLs per row, 2 % of the projector's time at 9,000 msg/s
    vector_of = (lambda key: vectors.get(key, _NO_VECTOR)) if vectors else (lambda key: {})
    rows, seqs = [], []
    for e in fresh:
        session = (e.workspace_id, e.session_id)
        next_seq[session] = next_seq.get(session, 0) + 1
        seqs.append((e, next_seq[session]))
        rows.append(
            dict(
                workspace_id=e.workspace_id,
                message_id=e.message_id,
                session_id=e.session_id,
                seq=next_seq[session],
                peer_id=e.peer_id,
                author_name=e.author_name or None,
                content=e.content,
                created_at=e.created_at,
                recorded_at=e.occurred_at,
                metadata=e.metadata,
                event_id=e.event_id,
                **vector_of((e.workspace_id, e.message_id)),
            )
        )
    copy_in(conn, messages, rows)
    _record_origins(conn, fresh)
    _set_counts(conn, next_seq)
    messages_configured(conn, seqs)
    _index_terms(conn, keys)
    lexicon.to_count(conn, keys)


def _record_origins(conn: Connection, fresh: Sequence[MessageAppended]) -> None:
    rows = [
        dict(
            workspace_id=e.workspace_id,
            message_id=e.message_id,
            origin_workspace_id=e.origin.workspace_id,
            origin_session_id=e.origin.session_id,
            origin_message_id=e.origin.message_id,
        )
        for e in fresh
        if e.origin is not None
    ]
    if rows:
        conn.execute(insert(message_origins), rows)


def messages_embedded(conn: Connection, events: Sequence[MessagesEmbedded]) -> None:
    """Vectors of the active model onto their messages; a vector whose message is not projected yet waits
    in the pending table. Another model's vectors (`peerlog reembed` ahead of a switch) stay on the log
    only: the live reads keep their model until a rebuild under the new setting takes those instead."""
    rows = [
        dict(
            workspace_id=e.workspace_id,
            message_id=m.message_id,
            embedding=m.vector.array(),
            embedding_model=e.embedding_model,
            event_id=e.event_id,
        )
        for e in events
        if e.embedding_model == ACTIVE_EMBEDDING_MODEL
        for m in e.messages
    ]
    if not rows:
        return
    m = messages.c
    known = set(
        conn.execute(
            select(m.workspace_id, m.message_id).where(
                among((m.workspace_id, m.message_id), sorted({(r["workspace_id"], r["message_id"]) for r in rows}))
            )
        ).tuples()
    )
    _set_embeddings(conn, [r for r in rows if (r["workspace_id"], r["message_id"]) in known])
    waiting = [r for r in rows if (r["workspace_id"], r["message_id"]) not in known]
    upsert_latest(conn, pending_message_embeddings, waiting, version="event_id")


# the latest embedding event wins whatever order events arrive in, and a repeat changes nothing
_SET_EMBEDDING = (
    update(messages)
    .where(
        messages.c.workspace_id == bindparam("w"),
        messages.c.message_id == bindparam("m"),
        or_(messages.c.embedding_event_id.is_(None), messages.c.embedding_event_id < bindparam("e")),
    )
    .values(
        embedding=bindparam("v", type_=Vector()), embedding_model=bindparam("model"), embedding_event_id=bindparam("e")
    )
)


def _set_embeddings(conn: Connection, rows: list[dict]) -> None:
    if rows:
        conn.execute(
            _SET_EMBEDDING,
            [
                dict(
                    w=r["workspace_id"],
                    m=r["message_id"],
                    v=r["embedding"],
                    model=r["embedding_model"],
                    e=r["event_id"],
                )
                for r in rows
            ],
        )


def _index_terms(conn: Connection, keys: list[tuple[str, str]]) -> None:
    """Copy the messages inserted just now into what lexical search scans (see schema.message_terms)."""
    m, columns = messages.c, [c.name for c in message_terms.c]
    conn.execute(
        insert(message_terms).from_select(
            columns, select(*(m[c] for c in columns)).where(among((m.workspace_id, m.message_id), keys))
        )
    )


_NO_VECTOR = dict(embedding=None, embedding_model=None, embedding_event_id=None)


def _take_pending_embeddings(conn: Connection, keys: list[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """The waiting vectors of the messages `keys` (about to be inserted), as their messages' columns.

    Each vector comes back in Postgres's binary form (pgvector's Vector) and goes into the message's COPY
    so (inserts.copy_in): printing it as text and parsing that back cost more than all the rest of taking it."""
    columns = ["workspace_id", "message_id", "embedding", "embedding_model", "event_id"]
    taken = take(conn, pending_message_embeddings, keys, columns)
    return {(w, m): dict(embedding=v, embedding_model=model, embedding_event_id=e) for w, m, v, model, e in taken}


# one array parameter instead of an IN list: the statement text stays the same for every batch
_SEEN_IDS = select(messages.c.event_id).where(messages.c.event_id == any_(bindparam("ids", type_=TextArray())))


def _unseen(conn: Connection, events: Sequence[MessageAppended]) -> list[MessageAppended]:
    ids = [e.event_id for e in events]
    seen = set(conn.scalars(_SEEN_IDS, {"ids": ids}))
    unique: dict[str, MessageAppended] = {}
    for e in events:
        if e.event_id not in seen:
            unique.setdefault(e.event_id, e)
    return list(unique.values())


# max(seq) per session as one correlated subquery each: a backward scan of messages_session_seq
# that reads one index entry, where GROUP BY over an IN list read every message of the sessions
_KEYS = (
    func.unnest(bindparam("ws", type_=TextArray()), bindparam("ss", type_=TextArray()))
    .table_valued("w", "s")
    .render_derived(name="k")
)
_LAST_SEQS = select(
    _KEYS.c.w,
    _KEYS.c.s,
    select(func.max(messages.c.seq))
    .where(messages.c.workspace_id == _KEYS.c.w, messages.c.session_id == _KEYS.c.s)
    .scalar_subquery(),
)


def _last_seqs(conn: Connection, keys: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
    ordered = sorted(keys)
    rows = conn.execute(_LAST_SEQS, {"ws": [w for w, _ in ordered], "ss": [s for _, s in ordered]})
    return {(w, s): n for w, s, n in rows if n is not None}


def _last_seq(conn: Connection, workspace_id: str, session_id: str) -> int:
    """The seq of the session's last projected message (0: none yet)."""
    return _last_seqs(conn, {(workspace_id, session_id)}).get((workspace_id, session_id), 0)


def _set_counts(conn: Connection, counts: dict[tuple[str, str], int]) -> None:
    stmt = (
        update(sessions)
        .where(
            and_(
                sessions.c.workspace_id == bindparam("w"),
                sessions.c.session_id == bindparam("s"),
            )
        )
        .values(message_count=bindparam("n"))
    )
    conn.execute(stmt, [{"w": w, "s": s, "n": n} for (w, s), n in counts.items()])


HANDLERS: dict[type[Event], Handler] = {
    **MEMORY_HANDLERS,
    **DREAM_HANDLERS,
    **SCOPE_HANDLERS,
    WorkspaceCreated: workspace_created,
    PeerCreated: peer_created,
    PeerConfigured: peer_configured,
    PeerMetadataSet: peer_metadata_set,
    SessionCreated: session_created,
    MemberJoined: member_joined,
    MemberLeft: member_left,
    MessageAppended: message_appended,
    MessagesEmbedded: messages_embedded,
    WorkspaceConfigured: workspace_configured,
    SessionConfigured: lambda conn, events: session_configured(conn, events, _last_seq),
    MessageConfigured: message_configured,
}
