"""Read queries over one pair's store of observations: the filter every read shares (pair, levels,
session, live or as of a time, session allowlist, derivation), lists, rankings, sources and premises."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import (
    ARRAY,
    Integer,
    RowMapping,
    Text,
    and_,
    bindparam,
    case,
    func,
    literal_column,
    select,
    true,
    tuple_,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.derivations import current_label
from projections.schema import (
    ACTIVE_EMBEDDING_MODEL,
    messages,
    observation_events,
    observation_sources,
    observations,
    premises,
)
from projections.vectors import Vector
from services.events import PAIR_WIDE, stored_derivation

# everything of an observation row but its vector and search columns, which no reader returns
OBSERVATION_COLUMNS = [c for c in observations.c if c.name not in ("embedding", "content_tsv", "content_key")]


@dataclass(frozen=True)
class ObservationFilter:
    """Which of a pair's observations a list or search covers."""

    workspace_id: str
    observer_id: str
    observed_id: str
    levels: Sequence[str] = ()
    session_id: str = ""
    include_superseded: bool = False
    include_deleted: bool = False
    # a session allowlist: None serves every session; see `_allowed_by_sessions`
    allowed_sessions: tuple[str, ...] | None = None
    # the store as it stood then: recorded by then, and superseded or deleted only after it
    as_of: datetime | None = None
    # "" follows the pair's current derivation (projections/derivations.py); a name reads that one
    derivation: str = ""

    def shape(self) -> tuple:
        """What decides the statement's structure; filters of one shape differ only in bound values."""
        return (
            bool(self.levels),
            bool(self.session_id),
            self.include_superseded,
            self.include_deleted,
            self.allowed_sessions is not None,
            self.as_of is not None,
        )

    def params(self) -> dict:
        """The values a statement built with `bound=False` is executed with."""
        named = stored_derivation(self.derivation) if self.derivation else None  # None: the current one
        return {
            "f_workspace_id": self.workspace_id,
            "f_observer_id": self.observer_id,
            "f_observed_id": self.observed_id,
            "f_derivation": named,
            "f_levels": list(self.levels),
            "f_session_id": self.session_id,
            "f_allowed": list(self.allowed_sessions or ()),
            "f_as_of": self.as_of,
        }

    def value(self, name: str, values: dict | None, expanding: bool = False):
        """A parameter for one filter value: carrying it (from `values`, this filter's `params()`), or named
        only (values None), for a statement cached by shape."""
        if values is None:
            return bindparam(f"f_{name}", expanding=expanding)
        return bindparam(f"f_{name}", values[f"f_{name}"], expanding=expanding)

    def where(self, table=observations, bound: bool = True) -> list:
        values = self.params() if bound else None
        c, v = table.c, (lambda name, **kw: self.value(name, values, **kw))
        as_of = v("as_of") if self.as_of is not None else None  # as of then: the derivation current then
        current = current_label(v("workspace_id"), v("observer_id"), v("observed_id"), as_of)
        out = [
            c.workspace_id == v("workspace_id"),
            c.observer_id == v("observer_id"),
            c.observed_id == v("observed_id"),
            # a named derivation's label, or (no name: NULL) the label of the pair's current one; and what
            # clients wrote, which is in every derivation
            c.derivation.in_([func.coalesce(v("derivation"), current), literal_column(f"'{PAIR_WIDE}'")]),
        ]
        if self.allowed_sessions is not None:
            out.append(_allowed_by_sessions(self, c, values))
        if self.levels:
            out.append(c.level.in_(v("levels", expanding=True)))
        if self.session_id:
            out.append(c.session_id == v("session_id"))
        if self.as_of is not None:
            out.append(c.created_at <= v("as_of"))
        if not self.include_superseded:
            out.append(
                c.superseded_by.is_(None)
                if self.as_of is None
                else c.superseded_at.is_(None) | (c.superseded_at > v("as_of"))
            )
        if not self.include_deleted:
            out.append(
                c.deleted_at.is_(None) if self.as_of is None else c.deleted_at.is_(None) | (c.deleted_at > v("as_of"))
            )
        return out

    def columns(self, bound: bool = True) -> list:
        """The columns a reader gets; as of a past time, times_derived counts reinforcements up to then and
        a supersession or deletion recorded after it is not shown (the row as the log said then)."""
        if self.as_of is None:
            return OBSERVATION_COLUMNS
        as_of, o, h = self.value("as_of", self.params() if bound else None), observations.c, observation_events.c
        reinforced = (
            select(func.count())
            .where(
                h.workspace_id == o.workspace_id,
                h.observation_id == o.observation_id,
                h.kind == "reinforced",
                h.occurred_at <= as_of,
            )
            .scalar_subquery()
        )
        then = {"times_derived": 1 + reinforced}
        for column, at in _LATER_CHANGES.items():
            then[column] = case((o[at] <= as_of, o[column]))
        return [then[c.name].label(c.name) if c.name in then else c for c in OBSERVATION_COLUMNS]


# columns set by a later change, with the time the change was recorded at: as of an earlier time, NULL
_LATER_CHANGES = {
    "superseded_by": "superseded_at",
    "superseded_at": "superseded_at",
    "deleted_at": "deleted_at",
    "delete_reason": "deleted_at",
    "premise_superseded_at": "premise_superseded_at",
}


def _outside_allowlist(where: ObservationFilter, values: dict | None):
    """Ids in the pair's store that an allowlist cannot vouch for, and everything concluded from them.

    The base: explicit observations from other sessions (or none), derived ones citing no premise, and
    premise ids the store lacks. Conclusions inherit it through the premise edges, so a derived
    observation is outside when any premise in its closure is — the rule works bottom-up in one
    recursive query instead of walking every candidate's closure.
    """
    o, p = observations.c, premises.c
    workspace = where.value("workspace_id", values)
    pair = [
        o.workspace_id == workspace,
        o.observer_id == where.value("observer_id", values),
        o.observed_id == where.value("observed_id", values),
    ]
    allowed = where.value("allowed", values, expanding=True)
    foreign = select(o.observation_id.label("id")).where(
        *pair, o.level == "explicit", ~func.coalesce(o.session_id.in_(allowed), False)
    )
    unfounded = select(o.observation_id).where(
        *pair,
        o.level != "explicit",
        ~select(p.premise_id).where(p.workspace_id == workspace, p.observation_id == o.observation_id).exists(),
    )
    pair_ids = select(o.observation_id).where(*pair)
    missing = select(p.premise_id).where(
        p.workspace_id == workspace, p.observation_id.in_(pair_ids), p.premise_id.not_in(pair_ids)
    )
    base = foreign.union(unfounded, missing).subquery("outside_base")
    outside = select(base.c.id).cte("outside_allowlist", recursive=True)
    inherited = select(p.observation_id).join(outside, p.premise_id == outside.c.id).where(p.workspace_id == workspace)
    return outside.union(inherited)


def _allowed_by_sessions(where: ObservationFilter, c, values: dict | None):
    """Explicit observations from allowed sessions; derived ones whose whole premise closure is."""
    return c.observation_id.not_in(select(_outside_allowlist(where, values).c.id))


async def observation(conn: AsyncConnection, workspace_id: str, observation_id: str) -> RowMapping | None:
    stmt = select(*OBSERVATION_COLUMNS).where(
        observations.c.workspace_id == workspace_id, observations.c.observation_id == observation_id
    )
    return (await conn.execute(stmt)).mappings().first()


async def observations_by_id(
    conn: AsyncConnection, workspace_id: str, observation_ids: Sequence[str]
) -> dict[str, RowMapping]:
    """The workspace's observations among `observation_ids`, by id (unknown ids are absent)."""
    stmt = select(*OBSERVATION_COLUMNS).where(
        observations.c.workspace_id == workspace_id, observations.c.observation_id.in_(list(observation_ids))
    )
    return {row["observation_id"]: row for row in (await conn.execute(stmt)).mappings()}


async def list_observations(
    conn: AsyncConnection,
    where: ObservationFilter,
    after: tuple[datetime, str] | None,
    limit: int,
    reverse: bool,
) -> Sequence[RowMapping]:
    """A pair's observations ordered by (created_at, observation_id), after a keyset cursor."""
    c = observations.c
    key = tuple_(c.created_at, c.observation_id)
    stmt = select(*where.columns()).where(*where.where())
    if after is not None:
        stmt = stmt.where(key < tuple_(*after) if reverse else key > tuple_(*after))
    order = [c.created_at.desc(), c.observation_id.desc()] if reverse else [c.created_at, c.observation_id]
    return (await conn.execute(stmt.order_by(*order).limit(limit))).mappings().all()


async def nearest_observations(
    conn: AsyncConnection,
    where: ObservationFilter,
    vector: Sequence[float],
    limit: int,
    max_distance: float | None,
) -> Sequence[RowMapping]:
    """A pair's observations nearest to `vector` by cosine distance (column `distance`), nearest first:
    the semantic slice of a working set."""
    return await working_set(conn, where, Slices(semantic=limit, max_distance=max_distance), vector)


async def sources_of(
    conn: AsyncConnection, workspace_id: str, observation_ids: Sequence[str], as_of: datetime | None = None
) -> dict[str, list[RowMapping]]:
    """Each observation's sources, oldest first, by observation id; with `as_of`, only those the events
    recorded by then added (a later reinforcement's are left out, as its count is). Every one: a fact
    reinforced often has thousands, so a reply shows `first_sources` instead."""
    t = observation_sources.c
    stmt = (
        select(observation_sources)
        .where(t.observation_id.in_(list(observation_ids)), *_shown_sources(workspace_id, as_of, None))
        .order_by(t.event_id, t.ordinal)
    )
    out: dict[str, list[RowMapping]] = {o: [] for o in observation_ids}
    for row in (await conn.execute(stmt)).mappings():
        out[row["observation_id"]].append(row)
    return out


@dataclass(frozen=True)
class FirstSources:
    """The first of an observation's sources, oldest first, and how many it has in all."""

    rows: list[RowMapping]
    count: int


async def first_sources(
    conn: AsyncConnection,
    workspace_id: str,
    observation_ids: Sequence[str],
    limit: int,
    as_of: datetime | None = None,
    allowed_sessions: Sequence[str] | None = None,
) -> dict[str, FirstSources]:
    """Each observation's first `limit` sources in `sources_of`'s order, with their number, by observation id;
    with `as_of`, only those recorded by then; with an allowlist of sessions, only those citing a message sent
    in one of them. Only those rows are fetched: the deriver adds a source at each reinforcement, and reading
    all 40,000 of one fact to show 100 took a second a read."""
    ids = list(dict.fromkeys(observation_ids))
    shown = _shown_sources(workspace_id, as_of, allowed_sessions)
    counts = await _source_counts(conn, ids, shown)
    out = {o: FirstSources([], counts.get(o, 0)) for o in ids}
    for row in await _first_source_rows(conn, ids, shown, limit):
        out[row["observation_id"]].rows.append(row)
    return out


async def _source_counts(conn: AsyncConnection, ids: list[str], shown: list) -> dict[str, int]:
    t = observation_sources.c
    stmt = select(t.observation_id, func.count()).where(t.observation_id.in_(ids), *shown).group_by(t.observation_id)
    return dict((await conn.execute(stmt)).all())


async def _first_source_rows(conn: AsyncConnection, ids: list[str], shown: list, limit: int) -> Sequence[RowMapping]:
    """The first `limit` rows of each observation: a LATERAL top-N per id keeps only `limit` rows in memory at
    a time, where numbering every row (row_number) would sort all of them."""
    t = observation_sources.c
    wanted = (
        func.unnest(bindparam("first_ids", ids, type_=ARRAY(Text)))
        .table_valued("observation_id")
        .render_derived("wanted")
    )
    first = (
        select(observation_sources)
        .where(t.observation_id == wanted.c.observation_id, *shown)
        .order_by(t.event_id, t.ordinal)
        .limit(limit)
        .lateral("first_sources")
    )
    f = first.c
    stmt = select(first).select_from(wanted).join(first, true()).order_by(f.observation_id, f.event_id, f.ordinal)
    return (await conn.execute(stmt)).mappings().all()


def _shown_sources(workspace_id: str, as_of: datetime | None, allowed_sessions: Sequence[str] | None) -> list:
    """Conditions on observation_sources: the workspace's rows; recorded by `as_of`, if given; citing a message
    sent in one of `allowed_sessions`, if given (a deriver before stop 60 reinforced a client's observation
    from any session, so a scope's observation may cite a session the scope leaves out)."""
    t = observation_sources.c
    out = [t.workspace_id == workspace_id]
    if as_of is not None:
        h = observation_events.c
        # the event that added the row (the observation's ObservationAdded or an ObservationReinforced)
        added = select(h.event_id).where(
            h.workspace_id == t.workspace_id,
            h.observation_id == t.observation_id,
            h.event_id == t.event_id,
            h.occurred_at <= as_of,
        )
        out.append(added.exists())
    if allowed_sessions is not None:
        m = messages.c
        sent = select(m.message_id).where(
            m.workspace_id == t.workspace_id, m.message_id == t.message_id, m.session_id.in_(list(allowed_sessions))
        )
        out.append(sent.exists())
    return out


async def sources_added_with(
    conn: AsyncConnection, workspace_id: str, rows: Sequence[RowMapping]
) -> dict[str, list[RowMapping]]:
    """Each observation's sources as its own ObservationAdded recorded them, in their order, by observation
    id: those later reinforcements added are left out (`rows` are observation rows, with their `event_id`)."""
    t = observation_sources.c
    stmt = (
        select(observation_sources)
        .where(t.workspace_id == workspace_id, t.event_id.in_([r["event_id"] for r in rows]))
        .order_by(t.event_id, t.ordinal)
    )
    out: dict[str, list[RowMapping]] = {r["observation_id"]: [] for r in rows}
    for row in (await conn.execute(stmt)).mappings():
        out[row["observation_id"]].append(row)
    return out


async def premises_of(conn: AsyncConnection, workspace_id: str, observation_ids: Sequence[str]) -> dict[str, list[str]]:
    """Each observation's premise ids, by observation id."""
    t = premises.c
    stmt = (
        select(t.observation_id, t.premise_id)
        .where(t.workspace_id == workspace_id, t.observation_id.in_(list(observation_ids)))
        .order_by(t.observation_id, t.premise_id)
    )
    out: dict[str, list[str]] = {o: [] for o in observation_ids}
    for observation_id, premise_id in await conn.execute(stmt):
        out[observation_id].append(premise_id)
    return out


async def premise_rows(
    conn: AsyncConnection, workspace_id: str, observation_ids: Sequence[str], as_of: datetime | None = None
) -> dict[str, list[RowMapping]]:
    """Each observation's live premises (observation_id, level, content), oldest first, by observation id:
    a premise deleted or superseded (by `as_of`, None: now) is not shown, as Chat's reasoning chain does
    not show it: its text was withdrawn and must not reach an agent as support."""
    if not observation_ids:
        return {}
    p, o = premises.c, observations.c
    stmt = (
        select(p.observation_id.label("concluded_id"), o.observation_id, o.level, o.content)
        .join(observations, (o.workspace_id == p.workspace_id) & (o.observation_id == p.premise_id))
        .where(p.workspace_id == workspace_id, p.observation_id.in_(list(observation_ids)))
        .where(*_live_at(o, as_of))
        .order_by(p.observation_id, o.created_at, o.observation_id)
    )
    out: dict[str, list[RowMapping]] = {}
    for row in (await conn.execute(stmt)).mappings():
        out.setdefault(row["concluded_id"], []).append(row)
    return out


@dataclass(frozen=True)
class Slices:
    """How many observations each slice of a working set takes (0 leaves a slice out)."""

    semantic: int = 0  # nearest to a query vector
    max_distance: float | None = None  # semantic hits farther than this are dropped
    reinforced: int = 0  # most derived
    recent: int = 0  # newest


SEMANTIC, REINFORCED, RECENT = 0, 1, 2
_WORKING_SETS: dict[tuple, object] = {}


def _working_set_statement(where: ObservationFilter, slices: Slices):
    """One statement for all slices, in two phases. The pair's store is scanned once, keeping only what
    the rankings read (id, time, times derived, the distance computed in the scan): the covering index
    observations_by_pair_ranked serves that scan without the table, and the narrow rows are what the
    materialized CTE copies. Then only the rows the slices keep are read whole, by key. Exact, not an
    HNSW scan: filtering an approximate scan afterwards can return fewer than asked for, and one pair's
    store is small enough to scan. Built once per shape (bound parameters, the slices' sizes apart)."""
    key = (
        where.shape(),
        slices.semantic > 0,
        slices.max_distance is not None,
        slices.reinforced > 0,
        slices.recent > 0,
    )
    if key in _WORKING_SETS:
        return _WORKING_SETS[key]
    o = observations.c
    # another model's vector has no distance (NULL): the semantic slice leaves it out
    distance = (
        case(
            (o.embedding_model == bindparam("model"), o.embedding.cosine_distance(bindparam("vector", type_=Vector())))
        )
        if slices.semantic
        else literal_column("NULL::float8")
    ).label("distance")
    columns = where.columns(bound=False)
    # times_derived as the read sees it (as of a time: the reinforcements up to then)
    times_derived = next(c for c in columns if c.name == "times_derived")
    store = (
        select(o.observation_id, o.created_at, times_derived, distance)
        .where(*where.where(bound=False))
        .cte("pair_store")
        .prefix_with("MATERIALIZED")
    )
    s = store.c

    def ranked(slice_no: int, order: list, *conditions, limit: str):
        rank = func.row_number().over(order_by=order).label("rank")
        return (
            select(literal_column(str(slice_no)).label("slice"), rank, s.observation_id, s.distance)
            .where(*conditions)
            .order_by(*order)
            # written into the text, not bound: with the counts as parameters Postgres planned the
            # statement again at every call (0.5 of its 3 ms); with them as literals it settles on one
            # generic plan (pg_prepared_statements.generic_plans)
            .limit(bindparam(limit, type_=Integer, literal_execute=True))
        )

    parts = []
    if slices.semantic:
        cap = [s.distance <= bindparam("max_distance")] if slices.max_distance is not None else []
        parts.append(
            ranked(SEMANTIC, [s.distance, s.observation_id], s.distance.is_not(None), *cap, limit="semantic_n")
        )
    if slices.reinforced:
        parts.append(
            ranked(REINFORCED, [s.times_derived.desc(), s.created_at.desc(), s.observation_id], limit="reinforced_n")
        )
    if slices.recent:
        parts.append(ranked(RECENT, [s.created_at.desc(), s.observation_id.desc()], limit="recent_n"))
    kept = (union_all(*parts) if len(parts) > 1 else parts[0]).subquery("slices")
    stmt = (
        select(kept.c.slice, kept.c.rank, *columns, kept.c.distance)
        .join_from(
            kept,
            observations,
            and_(o.workspace_id == bindparam("f_workspace_id"), o.observation_id == kept.c.observation_id),
        )
        .order_by(kept.c.slice, kept.c.rank)
    )
    _WORKING_SETS[key] = stmt
    return stmt


async def working_set(
    conn: AsyncConnection, where: ObservationFilter, slices: Slices, vector: Sequence[float] | None
) -> Sequence[RowMapping]:
    """A pair's observations by slice (column `slice`: SEMANTIC, REINFORCED, RECENT), each slice best
    first (column `rank`, and `distance` to the vector); an observation can appear in several slices.
    No vector: no semantic slice."""
    if vector is None:
        slices = Slices(reinforced=slices.reinforced, recent=slices.recent)
    stmt = _working_set_statement(where, slices)
    values = {
        **where.params(),
        "vector": list(vector) if vector is not None else None,
        "model": ACTIVE_EMBEDDING_MODEL,
        "max_distance": slices.max_distance,
        "semantic_n": slices.semantic,
        "reinforced_n": slices.reinforced,
        "recent_n": slices.recent,
    }
    return (await conn.execute(stmt, values)).mappings().all()


def _live_at(o, as_of: datetime | None) -> list:
    """Conditions on observation columns `o`: not deleted and not superseded by `as_of` (None: now)."""
    if as_of is None:
        return [o.deleted_at.is_(None), o.superseded_by.is_(None)]
    return [
        o.deleted_at.is_(None) | (o.deleted_at > as_of),
        o.superseded_at.is_(None) | (o.superseded_at > as_of),
    ]
