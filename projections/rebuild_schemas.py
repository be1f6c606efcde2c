"""The schemas rebuilds leave beside the live one, and the lock that lets one rebuild run at a time.

A rebuild fills `<live>_build_<stamp>` and, when it switches, renames the live schema to
`<live>_retired_<stamp>`. A build whose verification found differences is kept for inspection (marked
with a comment on the schema). A build without that mark, found while no rebuild runs, was left by a
rebuild that died: nothing can resume it and it holds a full copy of the projections, so the next rebuild
drops it. Retired and kept schemas stay until an operator drops them (`peerlog projections drop`).

Two rebuilds at once would each replay the whole log and switch one after the other; the second one now
stops at once instead. The lock is a Postgres session-level advisory lock held on its own connection for
the whole rebuild: if the holder dies, its session ends and the lock goes with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

KEPT_MARK = "peerlog: a rebuild kept this schema for inspection (its tables differed from the live ones)"

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
            kind = "kept" if match[1] == "build" and row.note == KEPT_MARK else match[1]
            found.append(SideSchema(row.name, kind, row.bytes))
    return found


def mark_kept(conn: Connection, schema: str) -> None:
    # COMMENT takes no bound parameters; both the name and the mark are ours
    conn.execute(text(f"COMMENT ON SCHEMA \"{schema}\" IS '{KEPT_MARK}'"))


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


def drop_abandoned(engine: Engine, live: str) -> list[SideSchema]:
    """Drop the builds that rebuilds which died left behind. Only under `one_rebuild`: then no build is
    in progress."""
    with engine.begin() as conn:
        abandoned = [s for s in side_schemas(conn, live) if s.kind == "build"]
        for schema in abandoned:
            conn.execute(text(f'DROP SCHEMA "{schema.name}" CASCADE'))
    return abandoned


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
