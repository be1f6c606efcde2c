"""Rebuild the projections: replay the log from offset 0 into a fresh schema, verify, switch.

The fresh schema is filled without its search indexes (HNSW over vectors, GIN over text): each is built
once after the replay, which costs a fraction of keeping it up to date row by row, and the replay
commits without waiting for its WAL flush (a crash of Postgres loses only the last batches, each with
its offsets, and they are replayed again). The message vectors are replayed before the rest, so each
message is written once with its vector (FIRST_TOPICS), and each batch is decoded while the one before
it is written. Then every table is vacuumed and analysed, so reads plan from real statistics from the
first moment, and what came meanwhile is replayed while the live projector runs on. The switch holds a
lock that pauses the live projector, replays the last few events so both schemas stand at the same
offsets, compares every table row for row, then renames the schemas in one transaction. Readers never
see a half-built schema; the live projector notices the new schema's generation and resumes from the
offsets it recorded.

Each replayed batch is committed with its offsets, so a build is never lost work: when Postgres goes
away the rebuild waits for it and carries on from the offsets its build recorded, and a rebuild that
died is carried on by the next one (rebuild_schemas.claim_abandoned).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from sqlalchemy import Connection, Engine, Index, text

from projections.apply import Decoded, Record, apply_batch, decode_all
from projections.db import create_schema, schema_exists, sync_engine
from projections.outages import while_database_away
from projections.projector import consumer_config, to_record
from projections.rebuild_schemas import BUILDING, KEPT, build_name, claim_abandoned, mark, one_rebuild, retired_name
from projections.schema import ACTIVE_EMBEDDING_MODEL, DATA_TABLES, metadata, projection_offsets
from services.bus.admin import partitions_of
from services.bus.topics import ALL_TOPICS, MESSAGE_EMBEDDINGS

if TYPE_CHECKING:  # the CLI composes the whole Settings; at run time projections never import services.settings
    from services.settings import Settings

log = logging.getLogger(__name__)
Progress = Callable[[str], None]
# index methods cheaper to build once over the full tables than to maintain through the replay; a
# B-tree that is too says so itself: Index(..., info={"deferred": True}), and may be only if no row it
# holds can pass a btree entry's size when the table's other indexes took it (the replay would not refuse it)
DEFERRED_METHODS = frozenset({"hnsw", "gin"})


# replayed before the other topics: a message's vector that waits when the message comes is written with
# it, where one coming after it rewrites the whole row (handlers.message_appended). The live projector
# meets both orders, so the projection is the same either way
FIRST_TOPICS = (MESSAGE_EMBEDDINGS,)


@dataclass
class RebuildReport:
    schema: str
    events: int = 0
    seconds: float = 0.0
    differences: dict[str, int] = field(default_factory=dict)
    switched: bool = False
    retired: str | None = None
    resumed: bool = False  # the build was left by a rebuild that died, and this one carried it on
    # rows of the build with no vector of the active model, by table; of them, those the live schema has a
    # vector for (of any model), which the switch would take away from searches by meaning
    without_vector: dict[str, int] = field(default_factory=dict)
    vectors_lost: dict[str, int] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase, in order

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] = time.monotonic() - started


def deferred_indexes() -> list[Index]:
    """The projection's indexes a rebuild creates after its replay (DEFERRED_METHODS, and those marked
    `deferred`)."""
    return [
        index
        for table in metadata.sorted_tables
        for index in sorted(table.indexes, key=lambda i: i.name)
        if index.dialect_options["postgresql"]["using"] in DEFERRED_METHODS or index.info.get("deferred")
    ]


def create_deferred(engine: Engine, progress: Progress) -> None:
    """Build the deferred indexes over the replayed tables, each in one pass."""
    with engine.connect() as conn:
        conn.execute(text("SET maintenance_work_mem = '1GB'"))  # an HNSW build fits in memory
        for index in deferred_indexes():
            started = time.monotonic()
            index.create(conn)
            conn.commit()
            progress(f"  built index {index.name} in {time.monotonic() - started:.1f} s")


class Replayer:
    """Applies the log into one schema, never past a per-partition target offset."""

    def __init__(self, settings: Settings, engine: Engine, progress: Progress) -> None:
        self.engine = engine
        self.progress = progress
        self.topic_prefix = settings.kafka.topic_prefix
        self.consumer = Consumer(consumer_config(settings, f"peerlog-rebuild-{uuid.uuid4().hex}"))
        self.partitions = [
            (name, p)
            for spec in ALL_TOPICS
            for name in [spec.full_name(settings.kafka.topic_prefix)]
            for p in partitions_of(settings.kafka, name)
        ]
        # from the offsets the build recorded with its rows: none in a fresh one, a resumed one's own
        with engine.connect() as conn:
            self.applied_upto = recorded_offsets(conn, schema_of(engine))
        self.consumer.assign(
            [TopicPartition(t, p, self.applied_upto.get((t, p), OFFSET_BEGINNING)) for t, p in self.partitions]
        )
        self.events = 0
        self.goal: dict[tuple[str, int], int] = {}  # the offsets progress is told against (the live projection's)
        self._last_report = time.monotonic()

    def replay_to(self, target: dict[tuple[str, int], int]) -> None:
        """Apply every record below `target` (missing partitions: 0); stop there.

        Each batch is decoded on a second thread while the one before it is written: decoding is a fifth
        of the replay's time and writing half of it, most of that spent waiting on Postgres."""
        self.consumer.resume([TopicPartition(t, p) for t, p in self.partitions])
        self._last_report = time.monotonic()
        taken: dict[tuple[str, int], int] = dict(self.applied_upto)  # next offset consumed, per partition
        pending = None  # the batch taken and being decoded, not applied yet
        with ThreadPoolExecutor(1, thread_name_prefix="rebuild-decode") as decoder:
            while pending is not None or not self._reached(target, taken):
                records = [] if self._reached(target, taken) else self._take(target, taken)
                upcoming = (records, decoder.submit(decode_all, records)) if records else None
                if pending is not None:
                    self._apply(pending[0], pending[1].result())
                pending = upcoming

    def _take(self, target, taken) -> list[Record]:
        records = [to_record(m) for m in self.consumer.consume(2000, 0.2) if m.error() is None]
        wanted = self._hold_back(records, target)
        for r in wanted:
            taken[(r.topic, r.partition)] = r.offset + 1
        return wanted

    def _apply(self, records: list[Record], decoded: Decoded) -> None:
        with self.engine.begin() as conn:
            conn.execute(text("SET LOCAL synchronous_commit = off"))
            self.events += apply_batch(conn, records, decoded).events
        for r in records:
            self.applied_upto[(r.topic, r.partition)] = r.offset + 1
        if time.monotonic() - self._last_report > 2:
            self.progress(f"  replayed {self.events} events{self._share()}")
            self._last_report = time.monotonic()

    def _share(self) -> str:
        """How far through the goal's offsets the build stands, counted from offset 0 (a carried-on build
        starts part of the way)."""
        total = sum(self.goal.values())
        done = sum(min(n, self.goal.get(tp, 0)) for tp, n in self.applied_upto.items())
        return f" ({100 * done / total:.0f} % of the log up to the live projection)" if total else ""

    def _reached(self, target: dict[tuple[str, int], int], upto: dict[tuple[str, int], int]) -> bool:
        return all(upto.get(tp, 0) >= target.get(tp, 0) for tp in self.partitions)

    def _hold_back(self, records, target):
        # a record at or past the target is left for the next phase: rewind to it and pause
        wanted, stopped = [], set()
        for r in records:
            tp = (r.topic, r.partition)
            if tp in stopped:
                continue
            if r.offset >= target.get(tp, 0):
                stopped.add(tp)
                self.consumer.seek(TopicPartition(r.topic, r.partition, r.offset))
                self.consumer.pause([TopicPartition(r.topic, r.partition)])
            else:
                wanted.append(r)
        return wanted

    def close(self) -> None:
        self.consumer.close()


def _only(target: dict[tuple[str, int], int], topics, settings: Settings) -> dict[tuple[str, int], int]:
    """`target` for the partitions of `topics` only (the others stay where they are)."""
    names = {spec.full_name(settings.kafka.topic_prefix) for spec in topics}
    return {tp: n for tp, n in target.items() if tp[0] in names}


def vacuum_analyze(engine: Engine, schema: str) -> None:
    """VACUUM (ANALYZE) every table of the rebuilt schema before the switch: reads after it plan from
    real statistics at once, not from whatever autovacuum gets to later, and the verification (under the
    lock that pauses the live projector) reads tables whose visibility is settled."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in DATA_TABLES:
            conn.execute(text(f'VACUUM (ANALYZE) "{schema}"."{table.name}"'))


def schema_of(engine: Engine) -> str:
    """The schema an engine from `sync_engine` reads and writes."""
    return engine.get_execution_options()["schema_translate_map"][None]


def recorded_offsets(conn: Connection, schema: str) -> dict[tuple[str, int], int]:
    """The next offset per partition the schema's projection recorded with its rows."""
    mapped = conn.execution_options(schema_translate_map={None: schema})
    return {(t, p): n for t, p, n in mapped.execute(projection_offsets.select())}


def compare(conn: Connection, live: str, build: str) -> dict[str, int]:
    """Rows present in one schema and not the other, per table (0 everywhere = identical). Columns by
    name, generated ones left out: Postgres computes those from the others, and a live schema from an
    older version may compute one by an older expression, which the rebuild brings up to date."""
    out = {}
    for table in DATA_TABLES:
        a, b = f'"{live}"."{table.name}"', f'"{build}"."{table.name}"'
        columns = ", ".join(f'"{c.name}"' for c in table.c if c.computed is None)
        n = conn.execute(
            text(
                f"SELECT (SELECT count(*) FROM (SELECT {columns} FROM {a} EXCEPT ALL SELECT {columns} FROM {b}) x)"
                f" + (SELECT count(*) FROM (SELECT {columns} FROM {b} EXCEPT ALL SELECT {columns} FROM {a}) y)"
            )
        ).scalar_one()
        out[table.name] = n
    return out


# the rows that can hold a vector, with their key: an empty message is never embedded (text_to_embed)
_VECTOR_ROWS = {
    "messages": ("message_id", "btrim(b.content) <> ''"),
    "observations": ("observation_id", "true"),
}


def missing_vectors(conn: Connection, build: str, live: str | None, model: str) -> tuple[dict, dict]:
    """Per table, the build's rows with no vector of `model`, and of them those `live` has a vector for
    (what a change of model left without one of the new model: see RebuildReport)."""
    without, lost = {}, {}
    for table, (key, can_hold) in _VECTOR_ROWS.items():
        lacks = f"{can_hold} AND (b.embedding IS NULL OR b.embedding_model IS DISTINCT FROM :model)"
        rows = f'FROM "{build}"."{table}" b'
        without[table] = conn.execute(text(f"SELECT count(*) {rows} WHERE {lacks}"), {"model": model}).scalar_one()
        if live is not None and without[table]:
            joined = f'{rows} JOIN "{live}"."{table}" l USING (workspace_id, {key})'
            lost[table] = conn.execute(
                text(f"SELECT count(*) {joined} WHERE {lacks} AND l.embedding IS NOT NULL"), {"model": model}
            ).scalar_one()
    return without, {t: n for t, n in lost.items() if n}


def rebuild(
    settings: Settings,
    progress: Progress = print,
    accept_differences: bool = False,
    stop: threading.Event | None = None,
    accept_missing_vectors: bool = False,
) -> RebuildReport:
    """Rebuild the serving schema from the log; see the module docstring. One rebuild at a time
    (RebuildInProgress). While Postgres or the broker is away it waits, then carries on its build, until
    `stop` is set; any other database error ends it (the build stays, and the next rebuild carries it on)."""
    retrying = while_database_away(stop or threading.Event(), "rebuild", broker_too=True)
    return retrying(_locked, settings, progress, Acceptance(accept_differences, accept_missing_vectors))


@dataclass(frozen=True)
class Acceptance:
    """What a rebuild switches despite: differing tables, rows left without a vector they had."""

    differences: bool = False
    missing_vectors: bool = False


def _check_sources(settings: Settings, live_engine: Engine, live: str) -> None:
    """LookupError, before anything is dropped or built, unless the log's topics exist under this prefix and
    the live schema in this database. A wrong PEERLOG_KAFKA_TOPIC_PREFIX dropped the build a rebuild that
    died had left to carry on; a schema not there (dropped, or a wrong PEERLOG_DATABASE_SCHEMA) gave a
    replay with nothing to catch up with, and an empty schema switched in as the live one."""
    for spec in ALL_TOPICS:
        partitions_of(settings.kafka, spec.full_name(settings.kafka.topic_prefix))
    with live_engine.connect() as conn:
        if not schema_exists(conn, live):
            raise LookupError(
                f"no schema {live!r} in this database to rebuild (PEERLOG_DATABASE_SCHEMA); with no projection "
                "at all, start the projector: it replays the whole log into a new one"
            )


def _locked(settings: Settings, progress: Progress, accept: Acceptance) -> RebuildReport:
    live = settings.database.schema_name
    live_engine = sync_engine(settings.database, live)
    try:
        with one_rebuild(live_engine, live):
            _check_sources(settings, live_engine, live)
            resumed, dropped = claim_abandoned(live_engine, live, settings.kafka.topic_prefix)
            for schema, why in dropped:
                progress(
                    f"dropped {schema.name} ({schema.bytes / 2**20:.1f} MiB), left by a rebuild that did not finish, "
                    f"{why}"
                )
            if resumed is not None:
                progress(f"resuming {resumed.name}, left by a rebuild that did not finish, from its recorded offsets")
            return _rebuild(settings, live_engine, progress, accept, resumed.name if resumed else None)
    finally:
        live_engine.dispose()


def start_build(settings: Settings, resume: str | None = None) -> tuple[str, Engine]:
    """The build schema, fresh or `resume`d, without its deferred indexes, and an engine on it."""
    live = settings.database.schema_name
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S") + uuid.uuid4().hex[:6]
    schema = resume or build_name(live, stamp)
    engine = sync_engine(settings.database, schema)
    # a resumed build made by older code is upgraded as the live one was; its deferred indexes are left
    # out (and dropped, if it died building them): built now, over the rows replayed so far, each would be
    # built again once the replay catches up
    create_schema(engine, schema, without=deferred_indexes())
    if resume is None:
        with engine.begin() as conn:
            mark(conn, schema, BUILDING, settings.kafka.topic_prefix)
    return schema, engine


def _rebuild(
    settings: Settings, live_engine: Engine, progress: Progress, accept: Acceptance, resume: str | None
) -> RebuildReport:
    started = time.monotonic()
    live = settings.database.schema_name
    schema, build_engine = start_build(settings, resume)
    report = RebuildReport(schema=schema, resumed=resume is not None)
    progress(f"rebuilding into schema {report.schema}")
    replayer = Replayer(settings, build_engine, progress)
    try:
        with live_engine.connect() as conn:
            has_live = schema_exists(conn, live)
            first_target = recorded_offsets(conn, live) if has_live else {}
        replayer.goal = first_target
        with report.phase("replay"):
            replayer.replay_to(_only(first_target, FIRST_TOPICS, settings))
            replayer.replay_to(first_target)
        progress(f"caught up with the live projection ({replayer.events} events); building its search indexes")
        with report.phase("indexes"):
            create_deferred(build_engine, progress)
        with report.phase("vacuum"):
            vacuum_analyze(build_engine, report.schema)
        if has_live:  # what came meanwhile, while the live projector runs on: less to replay under the lock
            with report.phase("catch_up_before_lock"), live_engine.connect() as conn:
                replayer.replay_to(recorded_offsets(conn, live))
        progress("vacuumed and analysed; switching")
        _switch(live_engine, replayer, report, has_live, accept, progress)
    finally:
        replayer.close()
        build_engine.dispose()
    report.events = replayer.events
    report.seconds = time.monotonic() - started
    phases = ", ".join(f"{name} {s:.1f} s" for name, s in report.phases.items())
    progress(f"{report.events} events in {report.seconds:.1f} s ({phases})")
    return report


def _switch(engine, replayer, report, has_live, accept: Acceptance, progress) -> None:
    live = schema_of(engine)
    with engine.begin() as conn:
        if has_live:
            # pauses the live projector (it locks offset rows) while reads go on
            conn.execute(text(f'LOCK TABLE "{live}".projection_offsets IN EXCLUSIVE MODE'))
            with report.phase("catch_up"):
                replayer.replay_to(recorded_offsets(conn, live))
            with report.phase("verify"):
                report.differences = compare(conn, live, report.schema)
            differing = {t: n for t, n in report.differences.items() if n}
            progress(
                "verified: identical to the live projection"
                if not differing
                else f"differences from the live projection: {differing}"
            )
            if differing and not accept.differences:
                mark(conn, report.schema, KEPT, replayer.topic_prefix)
                progress(
                    f"not switching; the rebuilt schema {report.schema} is kept for inspection "
                    f"(`peerlog projections drop {report.schema}` when done)"
                )
                return
        if not _vectors_checked(conn, report, live if has_live else None, accept, progress):
            return
        if has_live:
            report.retired = retired_name(live, report.schema.rsplit("_", 1)[1])  # same stamp as the build
        with report.phase("switch"):
            if report.retired:
                conn.execute(text(f'ALTER SCHEMA "{live}" RENAME TO "{report.retired}"'))
            conn.execute(text(f'ALTER SCHEMA "{report.schema}" RENAME TO "{live}"'))
    report.switched = True
    # the lock held the live projector from the last catch-up to the commit of the renames
    paused = sum(report.phases.get(name, 0.0) for name in ("catch_up", "verify", "switch"))
    progress(
        f"reads now served from the rebuilt schema ({live})"
        + (f"; the old one is kept as {report.retired}" if report.retired else "")
        + (f"; the live projector was paused {paused:.1f} s" if has_live else "")
    )


def _vectors_checked(conn, report: RebuildReport, live: str | None, accept: Acceptance, progress) -> bool:
    """Count the build's rows without a vector of the active model, say so, and whether to switch: not
    when some had a vector in the live schema (a change of model whose `peerlog reembed` missed them),
    unless accepted. The build then stays as it is, and the next rebuild carries it on."""
    report.without_vector, report.vectors_lost = missing_vectors(conn, report.schema, live, ACTIVE_EMBEDDING_MODEL)
    if any(report.without_vector.values()):
        _tell(
            progress,
            f"without a vector of {ACTIVE_EMBEDDING_MODEL} (searches by meaning miss them): "
            f"{_rows(report.without_vector)}; once every process embeds with {ACTIVE_EMBEDDING_MODEL}, "
            f"`peerlog reembed --model {ACTIVE_EMBEDDING_MODEL} -w WORKSPACE` gives them one",
        )
    if not report.vectors_lost:
        return True
    lost = _rows(report.vectors_lost)
    if accept.missing_vectors:
        _tell(progress, f"switching although rows lose the vector they have now ({lost}; --accept-missing-vectors)")
        return True
    _tell(
        progress,
        f"not switching: rows that have a vector in the live schema have none of {ACTIVE_EMBEDDING_MODEL} here "
        f"({lost}). "
        f"Run `peerlog reembed --model {ACTIVE_EMBEDDING_MODEL} -w WORKSPACE` for each workspace, then rebuild "
        f"again: it carries this build ({report.schema}) on. --accept-missing-vectors switches anyway",
    )
    return False


def _rows(counts: dict[str, int]) -> str:
    return ", ".join(f"{table}: {n}" for table, n in counts.items() if n)


def _tell(progress: Progress, line: str) -> None:
    # said twice on purpose: to whoever runs the rebuild, and to the log an operator reads later
    progress(line)
    log.warning("rebuild: %s", line)
