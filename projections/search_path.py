"""Which path a message search's semantic list takes: every message it may return compared, or the HNSW
graph walked; decided, with the walk's settings set, in one round trip before the search
(walk_settings_and_path), which also reads the observer's membership periods for the exact path."""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import Float, Integer, Text, bindparam, column, func, literal, or_, select, table
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.db import GENERIC_PLANS, mapped_schema
from projections.schema import memberships, message_lexicon, sessions
from projections.search_shape import Shape

# A search whose messages are V of the N the HNSW graph holds (every workspace's: one index serves them
# all) compares the query with every one of those V vectors when V² ≤ EXACT_SCAN_FACTOR × n × N, n being
# the candidates wanted; otherwise it walks the graph, visiting about n × N / V entries to find n the
# filter lets through. V is the workspace's messages, or those of the sessions a search is confined to
# (a perspective, a session list). Measured on the read bench's 50,000 messages (one workspace, V ≈ 3,750,
# 40 observers, whole searches without a prepared plan): the walk costs about 6.6 µs per entry visited
# (n = 40: 10.1 ms, n = 150: 19.9 ms), the scan about 0.7 µs per message since it reads the vectors from
# the covering index messages_session_vectors (n = 40: 9.2 ms, n = 150: 11.7 ms; 2.4 µs from the table's
# rows, when the factor was 2.5). Equal costs give about 9; 8 leans to the walk, whose cost is the better
# known. N, not the workspace's count: a small workspace beside a large one is a needle in the graph. Its
# walk visits about n × N / V entries (300 messages beside 300,000: 112 ms a search, 4 ms compared;
# tests/bench/tenants.py), and pgvector's iterative scan gives up at hnsw.max_scan_tuples (20,000 by
# default) with what it found by then: a short list, the rest of the workspace's matches never ranked.
EXACT_SCAN_FACTOR = 8.0
# ... and when they are at most this many: the comparison looks up each session (an index descent, a few
# µs), so an observer in 50,000 sessions that hold almost nothing walks the graph instead (190 ms a
# search otherwise, tests/bench/README.md)
MAX_EXACT_SESSIONS = 1_000
# the values under which the search receives the observer's membership periods (_observer_periods)
PERIOD_ARRAYS = PERIOD_SESSIONS, PERIOD_AFTER, PERIOD_UNTIL = ("period_sessions", "period_after", "period_until")

# the value of workspace_sessions' limit, MAX_EXACT_SESSIONS + 1 (a search's values carry it)
SESSIONS_LISTED = "sessions_listed"

_PG_CLASS = table("pg_class", column("relname"), column("relnamespace"), column("reltuples"), schema="pg_catalog")
_PG_NAMESPACE = table("pg_namespace", column("oid"), column("nspname"), schema="pg_catalog")


@lru_cache(maxsize=256)
def _walk_settings(shape: Shape, local: bool):
    """One row: the graph walk's settings set (set_config returns them) and whether the search's messages
    are too many to compare every one (`over`). `local`: the plan mode for the current transaction only."""
    columns = [
        func.set_config("hnsw.iterative_scan", "relaxed_order", False),
        func.set_config("hnsw.ef_search", bindparam("ef_search", type_=Text), False),
        # Planning the search costs about 2.6 ms, as much as half of running it, and Postgres's own
        # choice plans it again at each call. One generic plan serves every call of a statement: its
        # plan depends on the shape and the candidate counts, which are literals, not on the vector or
        # the ids. Undone by the transaction's end when local, else when the connection is next
        # borrowed from the pool (db.GENERIC_PLANS).
        func.set_config("plan_cache_mode", "force_generic_plan", local),
        _holds_too_many(shape).label("over"),
    ]
    if shape.perspective:
        periods = _observer_periods(shape)
        return select(*columns, *periods.c).select_from(periods)
    return select(*columns)


def _observer_periods(shape: Shape):
    """The observer's membership periods (within the listed sessions), as three parallel arrays, for the
    search that follows (PERIOD_ARRAYS): at most one more than MAX_EXACT_SESSIONS, as the exact path
    takes no more. Read here, in the round trip that decides the path, because a generic plan reading
    them inside the search sized them by the workspace's mean: with one peer in 50,000 sessions, a
    sequential scan of every membership (4.3 ms) where the index takes 0.05."""
    ms = memberships.c
    rows = select(ms.session_id, ms.joined_after_seq, ms.left_after_seq).where(
        ms.workspace_id == bindparam("workspace_id"), ms.peer_id == bindparam("perspective_id")
    )
    if shape.sessions:
        rows = rows.where(ms.session_id.in_(bindparam("session_ids", expanding=True)))
    listed = rows.limit(bindparam("max_sessions", type_=Integer) + 1).subquery("periods")
    return select(
        *(func.array_agg(column).label(name) for name, column in zip(PERIOD_ARRAYS, listed.c, strict=True))
    ).subquery("observer")


def _held_counts(shape: Shape):
    """The message count of each session a confined search is confined to, a row per session as it is
    read: the observer's memberships one after the other, each looking up its session's row (a session
    joined twice counts twice, which only leans the choice to the walk), or the listed sessions."""
    s = sessions.c
    if not shape.perspective:
        return select(s.message_count.label("c")).where(
            s.workspace_id == bindparam("workspace_id"), s.session_id.in_(bindparam("session_ids", expanding=True))
        )
    ms = memberships.c
    held = select(s.message_count).where(s.workspace_id == ms.workspace_id, s.session_id == ms.session_id)
    counts = select(held.scalar_subquery().label("c")).where(
        ms.workspace_id == bindparam("workspace_id"), ms.peer_id == bindparam("perspective_id")
    )
    return counts.where(ms.session_id.in_(bindparam("session_ids", expanding=True))) if shape.sessions else counts


def _workspace_messages():
    """The workspace's message count (the lexicon's row for the empty lexeme)."""
    lx = message_lexicon.c
    held = select(func.coalesce(func.max(lx.docs), 0)).where(
        lx.workspace_id == bindparam("workspace_id"), lx.lexeme == ""
    )
    return held.scalar_subquery()


def _graph_rows(workspace):
    """N: the messages of every workspace, which the graph spans; Postgres's estimate (pg_class.reltuples,
    kept by ANALYZE, autovacuum's included: -1 before the first), and never fewer than the workspace's."""
    c, n = _PG_CLASS.c, _PG_NAMESPACE.c
    estimate = (
        select(c.reltuples)
        .join_from(_PG_CLASS, _PG_NAMESPACE, n.oid == c.relnamespace)
        .where(n.nspname == func.coalesce(bindparam("tables_schema", type_=Text), func.current_schema()))
        .where(c.relname == "messages")
    )
    return func.greatest(estimate.scalar_subquery(), workspace)


def workspace_sessions():
    """The workspace's sessions in id order, at most one more than MAX_EXACT_SESSIONS: what the exact path
    of a search confined to none compares (message_search._sessions_compared), and how it counts them.
    Ordered and limited, a generic plan reads them from the primary key; bare, it sized them by the table's
    mean and read every workspace's sessions."""
    s = sessions.c
    return (
        select(s.session_id)
        .where(s.workspace_id == bindparam("workspace_id"))
        .order_by(s.session_id)
        .limit(bindparam(SESSIONS_LISTED, type_=Integer, literal_execute=True))  # a literal: the generic plan knows it
    )


def _running_counts(shape: Shape, workspace):
    """(v, sessions): the messages the search may return, as a running sum over its sessions, read until
    it passes a bound (_holds_too_many); one row, the workspace's messages and sessions, when it is
    confined to none."""
    if not shape.confined:
        listed = select(func.count()).select_from(workspace_sessions().subquery("listed")).scalar_subquery()
        return select(workspace.label("v"), listed.label("sessions")).subquery("running")
    counts = _held_counts(shape).subquery("held")
    return select(
        func.sum(counts.c.c).over(rows=(None, 0)).label("v"), func.row_number().over().label("sessions")
    ).subquery("running")


def _holds_too_many(shape: Shape):
    """Whether the search's messages are more than the exact comparison is worth, V² > EXACT_SCAN_FACTOR ×
    n × N, or its sessions more than MAX_EXACT_SESSIONS. Confined, V is a running sum of the sessions'
    message counts, read until it passes either bound: an observer in every session of a large workspace
    (an assistant) costs as many session lookups as it takes to pass them, where summing all of them cost
    11.7 ms a search among 50,000 sessions; and the exact comparison looks each of its sessions up,
    however few messages they hold."""
    workspace = _workspace_messages()
    running = _running_counts(shape, workspace)
    bound = bindparam("exact_scan_factor", type_=Float) * bindparam("n", type_=Integer) * _graph_rows(workspace)
    too_many = or_(running.c.v * running.c.v > bound, running.c.sessions > bindparam("max_sessions", type_=Integer))
    return select(literal(1)).select_from(running).where(too_many).exists()


async def walk_settings_and_path(conn: AsyncConnection, shape: Shape, values: dict) -> tuple[bool, dict]:
    """Set the graph walk's settings and say whether the semantic list compares every message of the
    search's sessions instead (EXACT_SCAN_FACTOR), in one round trip; with the observer's membership
    periods under a perspective (PERIOD_ARRAYS, as the search's values). The walk's settings are plain
    ones: readers' connections are mostly in autocommit, where SET LOCAL does nothing, and every search
    with a vector sets them first, so a pooled connection's earlier values are never the ones used."""
    ef_search = max(values["n"], 40)  # bounds the candidates one graph walk yields
    # in a transaction (GetContext's snapshot), the plan mode ends with it: no RESET round trip later
    local = not (await conn.get_raw_connection()).driver_connection.autocommit
    if not local:
        conn.info[GENERIC_PLANS] = True
    walk = {
        **values,
        "ef_search": str(ef_search),
        "exact_scan_factor": EXACT_SCAN_FACTOR,
        "max_sessions": MAX_EXACT_SESSIONS,
        "tables_schema": mapped_schema(conn.sync_connection),
        SESSIONS_LISTED: MAX_EXACT_SESSIONS + 1,
    }
    row = (await conn.execute(_walk_settings(shape, local), walk)).one()
    exact = not row.over
    # only the exact path reads them (message_search: _seen_compared, lexical): a walk sends no array of ids back
    observed = {name: getattr(row, name) or [] for name in PERIOD_ARRAYS} if exact and shape.perspective else {}
    return exact, {**observed, SESSIONS_LISTED: MAX_EXACT_SESSIONS + 1}
