"""Hybrid message search as one SQL statement: both candidate lists, fusion, neighbours, the named
authors' and times' lifts, the session's lead and the lift of turns placed in time for a question of
when, exactly as defined in message_ranking.py (whose docstring says why each step is there and what it
was worth). The lexical parts it composes are in lexical_terms.py; the search's shape is in
search_shape.py, and the choice of its semantic list's path in search_path.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import lru_cache

from sqlalchemy import (
    BigInteger,
    Integer,
    RowMapping,
    Text,
    and_,
    any_,
    bindparam,
    case,
    cast,
    func,
    literal,
    select,
    tuple_,
    union,
)
from sqlalchemy.dialects.postgresql import ARRAY, TIMESTAMP, TSQUERY
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.lexical_terms import bm25, named_peers, placed_in_time, query_terms, quoted_lexeme
from projections.message_ranking import (
    AUTHOR_BOOST,
    NEIGHBOUR_WEIGHT,
    SESSION_WEIGHT,
    SHORT_LEXEMES,
    SHORT_PENALTY,
    TIME_BOOST,
    WHEN_BOOST,
    reported,
    without_names,
)
from projections.message_reads import as_of_bound, seen_while_member
from projections.schema import (
    message_origins,
    message_terms,
    messages,
    sessions,
)
from projections.search_path import (
    PERIOD_AFTER,
    PERIOD_SESSIONS,
    PERIOD_UNTIL,
    walk_settings_and_path,
    workspace_sessions,
)
from projections.search_shape import MessageSearch, Shape, params
from projections.time_expressions import periods
from projections.vectors import Vector

# what a hit carries; not its metadata, up to 64 KB of JSON a message, which only SearchMessages returns
HIT_COLUMNS = (
    "workspace_id",
    "message_id",
    "session_id",
    "seq",
    "peer_id",
    "author_name",
    "content",
    "created_at",
)
MESSAGE_COLUMNS = (*HIT_COLUMNS, "metadata")


def _count(name: str):
    """A row count, written into the statement's text: with it as a parameter, the generic plan
    (_walk_settings) estimated the candidate lists at a tenth of the workspace and read all of its
    messages to find the neighbours of 50 candidates (69 ms where the search takes 6)."""
    return bindparam(name, type_=Integer, literal_execute=True)


def _filters(shape: Shape, t=messages) -> list:
    """The search's filters over message table (or alias) `t`."""
    m = t.c
    where = [m.workspace_id == bindparam("workspace_id")]
    if shape.sessions:
        where.append(m.session_id.in_(bindparam("session_ids", expanding=True)))
    if shape.authors:
        where.append(m.peer_id.in_(bindparam("author_ids", expanding=True)))
    if shape.after:
        where.append(m.created_at >= bindparam("after"))
    if shape.before:
        where.append(m.created_at < bindparam("before"))
    if shape.as_of:
        where.extend(_there_then(t))
    if shape.perspective:
        where.append(seen_while_member(t, bindparam("perspective_id")))
    return where


def _there_then(t) -> list:
    """`as_of_bound` over message table (or alias) `t`. message_terms holds no recorded_at: its message's
    row does, read by key (a read as of a time only)."""
    as_of = bindparam("as_of")
    if "recorded_at" in t.c:
        return as_of_bound(t, as_of)
    m = messages.c
    recorded = (
        select(literal(1))
        .where(m.workspace_id == t.c.workspace_id, m.message_id == t.c.message_id, m.recorded_at <= as_of)
        .exists()
    )
    return [t.c.created_at < as_of, recorded]


def _similarity(t):
    """Cosine similarity to the query; NULL for a vector of another model than the query's (see
    schema.ACTIVE_EMBEDDING_MODEL), which then counts as its list's lowest candidate."""
    return case(
        (
            t.c.embedding_model == bindparam("model"),
            1 - t.c.embedding.cosine_distance(bindparam("vector", type_=Vector())),
        )
    )


def _in_periods(created_at):
    """Whether `created_at` falls in one of the named periods (bound as parallel start and end arrays)."""
    stamps = ARRAY(TIMESTAMP(timezone=True))
    spans = (
        func.unnest(bindparam("starts", type_=stamps), bindparam("ends", type_=stamps))
        .table_valued("s", "e")
        .render_derived()
    )
    return select(literal(1)).select_from(spans).where(created_at >= spans.c.s, created_at < spans.c.e).exists()


def semantic(shape: Shape):
    """(message_id, s): the n most similar messages, s = cosine similarity: every message the search may
    return compared (`exact`: its sessions', or its workspace's), or the HNSW graph walked."""
    if shape.exact:
        return _seen_compared(shape) if shape.perspective else _sessions_compared(shape)
    m = messages.alias("sm")
    distance = m.c.embedding.cosine_distance(bindparam("vector", type_=Vector()))
    # only the active model's vectors are candidates, so the similarity needs no model check here
    return (
        select(m.c.message_id, m.c.session_id, m.c.seq, (1 - distance).label("s"))
        .where(*_filters(shape, m), m.c.embedding.is_not(None), m.c.embedding_model == bindparam("model"))
        .order_by(distance)
        .limit(_count("n"))
    )


def _sessions_compared(shape: Shape):
    """The exact semantic list without a perspective: the messages of each listed session, or of each of
    the workspace's, all compared (_compared). Not the workspace's messages read at once: a generic plan
    takes one workspace for a share of the table (half of it, beside one other), and read all 160,000
    rows to compare a small workspace's 400 (75-125 ms where a custom plan took 3-4)."""
    if shape.sessions:
        s = sessions.c
        listed = select(s.session_id).where(
            s.workspace_id == bindparam("workspace_id"), s.session_id.in_(bindparam("session_ids", expanding=True))
        )
    else:  # no more than the path's choice counted: it walks the graph past MAX_EXACT_SESSIONS
        listed = workspace_sessions()
    return _compared(listed.subquery("listed"), lambda m: [], replace(shape, sessions=False))


def _seen_compared(shape: Shape):
    """The exact semantic list under a perspective: for each of the observer's membership periods (read
    before, PERIOD_ARRAYS), its session's messages sent within it, all compared (_compared), from the
    periods as given. Joined freely, a generic plan sized the observer's memberships by the workspace's
    mean, and once one peer (an assistant) was in 50,000 sessions it read all of the workspace's messages
    for every observer (26 of a search's 42 ms). Periods do not overlap, so no message comes twice."""
    period = _periods_given()
    return _compared(
        period,
        lambda m: [
            # `seq + 0`: a filter on the covering index's included seq, not a key of messages_session_seq,
            # whose scan would read every compared message's row for its vector
            m.c.seq + 0 > period.c.joined_after_seq,
            period.c.left_after_seq.is_(None) | (m.c.seq <= period.c.left_after_seq),
        ],
        replace(shape, perspective=False, sessions=False),  # the periods stand for those two
    )


def _compared(outer, within: Callable, shape: Shape):
    """The n most similar messages of the sessions `outer` lists (rows with a session_id), under
    `shape`'s filters and the conditions `within` gives over the message table: for each session, the
    vectors of its messages (the covering index messages_session_vectors), all compared. A lateral
    subquery behind OFFSET 0: that is the plan whatever the statistics say."""
    m = messages.alias("sm")
    rows = select(m.c.message_id, m.c.session_id, m.c.seq, m.c.embedding).where(
        m.c.session_id == outer.c.session_id,
        *within(m),
        m.c.embedding.is_not(None),
        m.c.embedding_model == bindparam("model"),
        *_filters(shape, m),
    )
    seen = rows.offset(0).lateral("seen")
    similarity = (1 - seen.c.embedding.cosine_distance(bindparam("vector", type_=Vector()))).label("s")
    return (
        select(seen.c.message_id, seen.c.session_id, seen.c.seq, similarity)
        .select_from(outer)
        .join(seen, literal(True))
        # ordered by the output column: the expression again would compute each distance twice
        .order_by(similarity.desc(), seen.c.message_id)
        .limit(_count("n"))
    )


def _given(name: str, element_type):
    return cast(bindparam(name), ARRAY(element_type))  # typed even when empty


def _periods_given():
    """The observer's periods as the search's values give them: rows of (session_id, joined_after_seq,
    left_after_seq)."""
    return (
        func.unnest(_given(PERIOD_SESSIONS, Text), _given(PERIOD_AFTER, BigInteger), _given(PERIOD_UNTIL, BigInteger))
        .table_valued("session_id", "joined_after_seq", "left_after_seq")
        .render_derived("period")
    )


@lru_cache(maxsize=256)
def lexical(shape: Shape):
    """(message_id, s): the n messages of best BM25 among those `lexical_match` lets in."""
    terms, totals = query_terms(shape.narrow)
    m = message_terms.alias("lx")
    quoted = quoted_lexeme(terms.c.lexeme)
    any_rare = func.string_agg(quoted, literal(" | ")).filter(~terms.c.common)
    matching = select(cast(func.coalesce(any_rare, func.string_agg(quoted, literal(" & "))), TSQUERY))
    score = bm25(m, terms, totals)
    where = [*_filters(shape, m), m.c.content_tsv.op("@@")(matching.scalar_subquery())]
    if shape.perspective and shape.exact:
        # the observer's sessions as one array, an index condition (message_terms_by_session). Only when
        # they hold few of the workspace's messages (`exact`): then most matches are outside them, and the
        # array is short; an assistant in every session would look each of them up for nothing
        where.append(m.c.session_id == any_(_given(PERIOD_SESSIONS, Text)))
    return (
        select(m.c.message_id, m.c.session_id, m.c.seq, score.label("s"))
        .where(*where)
        .order_by(score.desc(), m.c.message_id)
        .limit(_count("n"))
    )


def _stats(listed, present: bool):
    """(mean, std, low) of a list's scores as a one-row CTE; zeros when the search has no such list (its
    z-scores are then 0 without reading them)."""
    if not present:
        return select(literal(0.0).label("mean"), literal(0.0).label("std"), literal(0.0).label("low"))
    return select(
        func.coalesce(func.avg(listed.c.s), 0.0).label("mean"),
        func.coalesce(func.stddev_pop(listed.c.s), 0.0).label("std"),
        func.min(listed.c.s).label("low"),  # NULL for no candidates: as `list_stats`' infinity, reached by none
    )


def _z(score, stats):
    """As `standardised`."""
    return case(
        (stats.c.std > 0, (func.coalesce(score, stats.c.low) - stats.c.mean).self_group().op("/")(stats.c.std)),
        (score >= stats.c.low, 1.0),
        else_=0.0,
    )


@lru_cache(maxsize=256)
def fused(shape: Shape, metadata: bool = False):
    """The whole search as one statement: both lists, their candidates and adjacent turns scored
    exactly, z-score fusion, the neighbours' and the session's share as in `fused_score`, then the rows
    (with their metadata if asked)."""
    terms, totals = query_terms(shape.narrow)
    lists = []
    if shape.vector:
        sem = semantic(shape).cte("sem").prefix_with("MATERIALIZED", dialect="postgresql")
        lists.append(sem)
    if shape.text:
        lex = lexical(shape).cte("lex").prefix_with("MATERIALIZED", dialect="postgresql")
        lists.append(lex)
    # materialized: computed once. Inlined, a generic plan (a prepared statement's, after five runs) could
    # re-aggregate a whole list for every row of the pool: 451 × 150 rows, 6.5 of a search's 19 ms
    sem_stats = _stats(lists[0], shape.vector).cte("sem_stats").prefix_with("MATERIALIZED", dialect="postgresql")
    lex_stats = _stats(lists[-1], shape.text).cte("lex_stats").prefix_with("MATERIALIZED", dialect="postgresql")
    # where the candidates sit, from the lists themselves: no lookup of their rows
    hit = union(*(select(x.c.session_id, x.c.seq) for x in lists)).cte("hit")
    m = messages.c
    # the candidates and their adjacent turns, each once, under the same filters
    p = messages.alias("pool")
    sem_z = _z(_similarity(p), sem_stats) if shape.vector else literal(0.0)
    lex_z = _z(bm25(p, terms, totals), lex_stats) if shape.text else literal(0.0)
    placed = [placed_in_time(p.c.content_tsv).label("placed")] if shape.when else []
    pool = (
        select(
            p.c.message_id,
            p.c.session_id,
            p.c.seq,
            p.c.peer_id,
            p.c.created_at,
            func.length(p.c.content_tsv).label("lexemes"),
            (sem_z + lex_z).label("f"),
            *placed,
        )
        .distinct()
        .select_from(hit)
        .join(
            p,
            and_(
                p.c.workspace_id == bindparam("workspace_id"),
                p.c.session_id == hit.c.session_id,
                p.c.seq.between(hit.c.seq - 1, hit.c.seq + 1),
            ),
        )
        .join(sem_stats, literal(True))
        .join(lex_stats, literal(True))
        .where(*_filters(shape, p))
        .cte("pool")
    )
    window = {"partition_by": pool.c.session_id, "order_by": pool.c.seq}
    before, after = func.lag(pool.c.seq).over(**window), func.lead(pool.c.seq).over(**window)
    prev_f, next_f = func.lag(pool.c.f).over(**window), func.lead(pool.c.f).over(**window)
    adjacent = func.greatest(case((before == pool.c.seq - 1, prev_f)), case((after == pool.c.seq + 1, next_f)))
    named = named_peers()
    short = case((pool.c.lexemes < SHORT_LEXEMES, SHORT_PENALTY), else_=0.0)
    boost = case((pool.c.peer_id.in_(select(named.c.peer_id)), AUTHOR_BOOST), else_=0.0)
    if shape.periods:
        boost = boost + case((_in_periods(pool.c.created_at), TIME_BOOST), else_=0.0)
    if shape.when:
        boost = boost + case((pool.c.placed, WHEN_BOOST), else_=0.0)
    based = select(
        pool.c.message_id,
        pool.c.session_id,
        boost.label("boost"),
        (pool.c.f + NEIGHBOUR_WEIGHT * func.coalesce(adjacent, 0.0) - short).label("topical"),
    ).subquery("based")
    lead = func.greatest(func.max(based.c.topical).over(partition_by=based.c.session_id), 0.0)
    scored = select(
        based.c.message_id, (based.c.topical + based.c.boost + SESSION_WEIGHT * lead).label("score")
    ).subquery("scored")
    best = select(scored).order_by(scored.c.score.desc(), scored.c.message_id).limit(_count("limit")).subquery("best")
    o = message_origins.c
    return (
        # with where a CloneSession copy was first sent (NULL for the rest), so a turn and its copies can be
        # told apart as one without another statement (GetContext's relevant section)
        select(
            *(m[c] for c in (MESSAGE_COLUMNS if metadata else HIT_COLUMNS)),
            best.c.score,
            o.origin_workspace_id,
            o.origin_session_id,
            o.origin_message_id,
        )
        .join_from(best, messages, and_(m.workspace_id == bindparam("workspace_id"), m.message_id == best.c.message_id))
        .outerjoin(message_origins, and_(o.workspace_id == m.workspace_id, o.message_id == m.message_id))
        .order_by(best.c.score.desc(), best.c.message_id)
    )


async def search_text(conn: AsyncConnection, workspace_id: str, query: str) -> str:
    """The text to embed for a search of `query` in the workspace: `without_names` of the peers it
    names, by display name, else by id (step 4's rule)."""
    if not query.strip():
        return query
    named = (await conn.execute(_named(), {"workspace_id": workspace_id, "q": query})).all()
    return without_names(query, [name or peer_id for peer_id, name in named])


@lru_cache(maxsize=1)
def _named():
    """The ids and display names of the peers a query names, as one statement built once (each call
    reads it)."""
    named = named_peers()
    return select(named.c.peer_id, named.c.name)


async def search_messages(conn: AsyncConnection, search: MessageSearch, metadata: bool = False) -> list[RowMapping]:
    """Message rows matching `search`, best first, each with its fused `score` (see module docstring); with
    `metadata`, each with its metadata too."""
    if search.vector is None and not search.query.strip():
        return []
    at = search.before or search.as_of or datetime.now(UTC)  # what "yesterday" is relative to
    named_periods = [reported(p) for p in periods(search.query, at, search.zone)]
    values = params(search, named_periods)
    shape = Shape.of(search, named_periods)
    if search.vector is not None:
        exact, observed = await walk_settings_and_path(conn, shape, values)
        shape, values = replace(shape, exact=exact), {**values, **observed}
    return list((await conn.execute(fused(shape, metadata), values)).mappings().all())


async def adjacent_turns(
    conn: AsyncConnection, search: MessageSearch, hits: Sequence[RowMapping]
) -> dict[tuple[str, int], RowMapping]:
    """The turns just before and after each hit in its session, by (session_id, seq). Only the
    perspective (and an as_of) applies: a hit's context may be another author's turn or outside the time range."""
    wanted = sorted({(h["session_id"], h["seq"] + d) for h in hits for d in (-1, 1)})
    if not wanted:
        return {}
    m = messages.c
    stmt = select(*(m[c] for c in MESSAGE_COLUMNS)).where(
        m.workspace_id == search.workspace_id, tuple_(m.session_id, m.seq).in_(wanted)
    )
    if search.perspective_id:
        stmt = stmt.where(seen_while_member(messages, search.perspective_id))
    if search.as_of is not None:
        stmt = stmt.where(*as_of_bound(messages, search.as_of))
    return {(r["session_id"], r["seq"]): r for r in (await conn.execute(stmt)).mappings()}
