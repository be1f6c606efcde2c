"""The schemas rebuilds leave beside the live one, and the lock that lets one rebuild run at a time.

A rebuild fills `<live>_build_<stamp>` and, when it switches, renames the live schema to
`<live>_retired_<stamp>`. A comment on a build schema says what it is: a build, with the topics it
replays, the settings that shape its rows (the embedding model and size) and the code that makes them
(made_by), or one kept for inspection because its tables differed from the live ones. A build found while
no rebuild runs was left by one that died (killed, its machine lost, Postgres restarted under it). Each
batch it replayed was committed with its offsets, so the next rebuild resumes the newest such build made
by the same code under the same settings, and drops the others: each holds a full copy of the
projections. A build an older version left is not carried on: that version may have parked events of a
version it could not read, or computed a column by an older expression, and the replay would start past
them. Retired and kept schemas stay until an operator drops them (`peerlog projections drop`).

Two rebuilds at once would each replay the whole log and switch one after the other; the second one now
stops at once instead. The lock is a Postgres session-level advisory lock held on its own connection for
the whole rebuild: if the holder dies, its session ends and the lock goes with it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex, CreateTable

from projections.schema import ACTIVE_EMBEDDING_MODEL, EMBEDDING_DIMENSIONS, metadata
from services.events import event_types

BUILDING, KEPT = "build", "kept"

_TRY = text("SELECT pg_try_advisory_lock(hashtextextended(:key, 0))")
_RELEASE = text("SELECT pg_advisory_unlock(hashtextextended(:key, 0))")
_SCHEMAS = text(
    "SELECT n.nspname AS name, obj_description(n.oid, 'pg_namespace') AS note, "
    "coalesce((SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
    "WHERE c.relnamespace = n.oid AND c.relkind = 'r'), 0)::bigint AS bytes "
    "FROM pg_namespace n WHERE starts_with(n.nspname, :prefix) ORDER BY n.nspname"
)


class RebuildInProgress(RuntimeError):
    """Another rebuild of the same live schema holds the lock."""


@dataclass(frozen=True)
class SideSchema:
    name: str
    kind: str  # "build" (in progress, or left by a rebuild that died), "kept" or "retired"
    bytes: int
    mark: dict = field(default_factory=dict)  # what its comment says (builds and kept ones)

    def resumable(self, topic_prefix: str) -> bool:
        """A build whose rows the current code and settings would write the same way, from the same topics."""
        return self.kind == BUILDING and not self.unlike(topic_prefix)

    def unlike(self, topic_prefix: str) -> str:
        """How the build differs from one the current code and settings would make, in words for the
        operator; '' when it does not."""
        now = mark_of(BUILDING, topic_prefix)
        if self.mark == now:
            return ""
        if self.mark.get("peerlog") != BUILDING:
            return "with no mark of what made it (killed before it was marked)"
        differing = (why for key, why in _MADE_UNDER.items() if self.mark.get(key) != now[key])
        return next(differing, "made under other settings")


# what a build's mark names, and how a build that differs in it is told apart in the log
_MADE_UNDER = {
    "topic_prefix": "made from another topic prefix's topics",
    "embedding_model": "made under another embedding model",
    "dimensions": "made under another embedding size",
    "made_by": "made by another version of peerlog (other event versions, tables or handlers)",
}
# what makes the rows when no declaration says so: bump it when a handler writes other rows than before
# for the same events (refuses what it recorded, fills a column otherwise), so that a build an older
# version left is made anew instead of carried on
HANDLERS_REVISION = 1


def made_by() -> str:
    """A digest of what turns the log into rows: each event type's current schema version (an older one
    parks what it cannot read), each table and index as Postgres creates it (generated expressions
    included), and HANDLERS_REVISION."""
    dialect = postgresql.dialect()
    # the events peerlog declares: a test's own Event subclass registers too, and a process that imported it
    # would name another digest than a rebuild process that did not, and drop a build it could carry on
    declared = sorted((n, c) for n, c in event_types().items() if c.__module__.startswith("services.events"))
    shape = [f"{name} v{cls.schema_version_current}" for name, cls in declared]
    for table in metadata.sorted_tables:
        shape.append(str(CreateTable(table).compile(dialect=dialect)))
        shape += [str(CreateIndex(i).compile(dialect=dialect)) for i in sorted(table.indexes, key=lambda i: i.name)]
    shape.append(f"handlers {HANDLERS_REVISION}")
    return hashlib.sha256("\n".join(shape).encode()).hexdigest()[:16]


def mark_of(state: str, topic_prefix: str) -> dict:
    """What a build schema's comment holds: its state, the topics it replays, the settings that shape its
    rows and the code that makes them."""
    return {
        "peerlog": state,
        "topic_prefix": topic_prefix,
        "embedding_model": ACTIVE_EMBEDDING_MODEL,
        "dimensions": EMBEDDING_DIMENSIONS,
        "made_by": made_by(),
    }


def _parsed(comment: str | None) -> dict:
    try:
        mark = json.loads(comment or "{}")
    except ValueError:
        return {}
    return mark if isinstance(mark, dict) else {}


def build_name(live: str, stamp: str) -> str:
    return f"{live}_build_{stamp}"


def retired_name(live: str, stamp: str) -> str:
    return f"{live}_retired_{stamp}"


def side_schemas(conn: Connection, live: str) -> list[SideSchema]:
    """The build, kept and retired schemas of `live`, by name (their stamps sort by time)."""
    pattern = re.compile(rf"{re.escape(live)}_(build|retired)_[0-9]{{14}}[0-9a-f]{{6}}")
    found = []
    for row in conn.execute(_SCHEMAS, {"prefix": f"{live}_"}):
        match = pattern.fullmatch(row.name)
        if match:
            mark = _parsed(row.note) if match[1] == BUILDING else {}
            kind = KEPT if mark.get("peerlog") == KEPT else match[1]
            found.append(SideSchema(row.name, kind, row.bytes, mark))
    return found


def mark(conn: Connection, schema: str, state: str, topic_prefix: str) -> None:
    """Say what the build schema is (BUILDING or KEPT), with the settings it is built under."""
    # COMMENT takes no bound parameters: the mark goes in as a literal, its quotes doubled
    literal = json.dumps(mark_of(state, topic_prefix)).replace("'", "''")
    conn.execute(text(f"COMMENT ON SCHEMA \"{schema}\" IS '{literal}'"))


@contextmanager
def one_rebuild(engine: Engine, live: str) -> Iterator[None]:
    """Hold the rebuild lock of `live` for the body, or raise RebuildInProgress."""
    key = {"key": f"peerlog-rebuild:{live}"}
    with engine.connect() as conn:
        got = conn.execute(_TRY, key).scalar()
        conn.commit()  # a session lock: it outlives the transaction that took it
        if not got:
            raise RebuildInProgress(
                f"another rebuild of schema {live!r} is running (or a drop of one of its schemas); "
                "run this again when it has finished"
            )
        try:
            yield
        finally:
            conn.execute(_RELEASE, key)
            conn.commit()


def claim_abandoned(
    engine: Engine, live: str, topic_prefix: str
) -> tuple[SideSchema | None, list[tuple[SideSchema, str]]]:
    """The build to resume, if any, and the builds dropped, each with why: of the builds rebuilds that died
    left behind, the newest the current code and settings can resume is kept, the others are dropped.
    Only under `one_rebuild`: then no build is in progress."""
    with engine.begin() as conn:
        abandoned = [s for s in side_schemas(conn, live) if s.kind == BUILDING]
        resumable = [s for s in abandoned if s.resumable(topic_prefix)]
        resumed = resumable[-1] if resumable else None
        dropped = [
            (s, s.unlike(topic_prefix) or "older than the one carried on") for s in abandoned if s is not resumed
        ]
        for schema, _ in dropped:
            conn.execute(text(f'DROP SCHEMA "{schema.name}" CASCADE'))
    return resumed, dropped


def drop_side_schema(engine: Engine, live: str, name: str) -> SideSchema:
    """Drop one retired, kept or abandoned schema of `live`; never the live one, nor a build in progress
    (RebuildInProgress while a rebuild runs). ValueError for a name that is none of them."""
    if name == live:
        raise ValueError(f"{name!r} is the live schema: reads are served from it")
    with one_rebuild(engine, live), engine.begin() as conn:
        schema = next((s for s in side_schemas(conn, live) if s.name == name), None)
        if schema is None:
            raise ValueError(
                f"{name!r} is not a build, kept or retired schema of {live!r}; `peerlog projections schemas` lists them"
            )
        conn.execute(text(f'DROP SCHEMA "{name}" CASCADE'))
    return schema
