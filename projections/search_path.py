"""Which path a message search's semantic list takes: every message of its sessions compared, or the HNSW
graph walked; decided, with the walk's settings set, in one round trip before the search
(walk_settings_and_path), which also reads the observer's membership periods for the exact path."""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import Float, Integer, Text, bindparam, func, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.db import GENERIC_PLANS
from projections.schema import memberships, message_lexicon, sessions
from projections.search_shape import Shape

# A search confined to sessions (a perspective, a session list) holding V of the workspace's W messages
# compares the query with every one of those V vectors when V² ≤ EXACT_SCAN_FACTOR × n × W, n being the
# candidates wanted; otherwise it walks the HNSW graph, visiting about n × W / V entries to find n the
# filter lets through. Measured on the read bench's 50,000 messages (V ≈ 3,750, 40 observers, whole
# searches without a prepared plan): the walk costs about 6.6 µs per entry visited (n = 40: 10.1 ms,
# n = 150: 19.9 ms), the scan about 0.7 µs per message since it reads the vectors from the covering
# index messages_session_vectors (n = 40: 9.2 ms, n = 150: 11.7 ms; 2.4 µs from the table's rows, when
# the factor was 2.5). Equal costs give about 9; 8 leans to the walk, whose cost is the better known.
EXACT_SCAN_FACTOR = 8.0
# ... and when they are at most this many: the comparison looks up each session (an index descent, a few
# µs), so an observer in 50,000 sessions that hold almost nothing walks the graph instead (190 ms a
# search otherwise, tests/bench/README.md)
MAX_EXACT_SESSIONS = 1_000
# the values under which the search receives the observer's membership periods (_observer_periods)
PERIOD_ARRAYS = PERIOD_SESSIONS, PERIOD_AFTER, PERIOD_UNTIL = ("period_sessions", "period_after", "period_until")


@lru_cache(maxsize=256)
def _walk_settings(shape: Shape, local: bool):
    """One row: the graph walk's settings set (set_config returns them) and, for a search confined to
    sessions, whether those sessions hold too many messages to compare every one (`over`). `local`: the
    plan mode for the current transaction only."""
    columns = [
        func.set_config("hnsw.iterative_scan", "relaxed_order", False),
        func.set_config("hnsw.ef_search", bindparam("ef_search", type_=Text), False),
        # Planning the search costs about 2.6 ms, as much as half of running it, and Postgres's own
        # choice plans it again at each call. One generic plan serves every call of a statement: its
        # plan depends on the shape and the candidate counts, which are literals, not on the vector or
        # the ids. Undone by the transaction's end when local, else when the connection is next
        # borrowed from the pool (db.GENERIC_PLANS).
        func.set_config("plan_cache_mode", "force_generic_plan", local),
    ]
    if shape.confined:
        columns.append(_holds_too_many(shape).label("over"))
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


def _holds_too_many(shape: Shape):
    """Whether the search's sessions hold more than the exact comparison is worth, V² > EXACT_SCAN_FACTOR ×
    n × W, or are more than MAX_EXACT_SESSIONS: a running sum of their message counts, read until it passes
    either bound. An observer in every session of a large workspace (an assistant) costs as many session
    lookups as it takes to pass them, where summing all of them cost 11.7 ms a search among 50,000
    sessions; and the exact comparison looks each of its sessions up, however few messages they hold."""
    counts = _held_counts(shape).subquery("held")
    running = select(
        func.sum(counts.c.c).over(rows=(None, 0)).label("v"), func.row_number().over().label("sessions")
    ).subquery("running")
    lx = message_lexicon.c
    corpus = select(func.coalesce(func.max(lx.docs), 0)).where(
        lx.workspace_id == bindparam("workspace_id"), lx.lexeme == ""
    )
    bound = bindparam("exact_scan_factor", type_=Float) * bindparam("n", type_=Integer) * corpus.scalar_subquery()
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
    }
    row = (await conn.execute(_walk_settings(shape, local), walk)).one()
    exact = shape.confined and not row.over
    # only the exact path reads them (message_search: _seen_compared, lexical): a walk sends no array of ids back
    observed = {name: getattr(row, name) or [] for name in PERIOD_ARRAYS} if exact and shape.perspective else {}
    return exact, observed
