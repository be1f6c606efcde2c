"""Webhook endpoints, each endpoint's progress through the log and its dead letters, in Postgres.

Not a projection: nothing here follows from the log, so it lives in its own schema
(`<projection schema>_webhooks`), which a projection rebuild neither drops nor replays. Progress and a
dead letter are written in one transaction, so a restarted worker resumes exactly after the last event
it finished with (a crash between a receiver's 2xx and that write repeats one delivery, which
Peerlog-Event-Id lets the receiver drop)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Column,
    DateTime,
    Engine,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    delete,
    func,
    insert,
    select,
    text,
    tuple_,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from projections.settings import DatabaseSettings
from services.bus.subscription import Position
from services.webhooks.delivery import Endpoint

metadata = MetaData()
endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("endpoint_id", String, primary_key=True),
    Column("workspace_id", String, nullable=False, index=True),
    Column("url", Text, nullable=False),
    Column("secret", LargeBinary, nullable=False),
    Column("event_types", ARRAY(String), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
progress = Table(
    "webhook_progress",
    metadata,
    Column("endpoint_id", String, primary_key=True),
    Column("topic", String, primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("next_offset", BigInteger, nullable=False),
)
dead_letters = Table(
    "webhook_dead_letters",
    metadata,
    Column("endpoint_id", String, primary_key=True),
    Column("event_id", String, primary_key=True),
    Column("event_type", String, nullable=False),
    Column("body", LargeBinary, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("error", Text, nullable=False),
    Column("dead_at", DateTime(timezone=True), nullable=False),
)


@dataclass(frozen=True)
class DeadLetter:
    endpoint_id: str
    event_id: str
    event_type: str
    body: bytes
    attempts: int
    error: str


def engine_for(settings: DatabaseSettings) -> Engine:
    """An engine on the webhook tables, which it creates if they are missing."""
    schema = f"{settings.schema_name}_webhooks"
    engine = create_engine(settings.url, pool_size=2, pool_pre_ping=True, **settings.engine_args())
    engine = engine.execution_options(schema_translate_map={None: schema})
    with engine.begin() as conn:
        # the API and the webhook process both create them at start: serialised as projections/db.py does its
        # schema (two CREATE ... IF NOT EXISTS at once collide on the catalogue's unique indexes, and one
        # process failed to start)
        conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(f"peerlog-schema:{schema}"))))
        conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
        metadata.create_all(conn)
    return engine


class WebhookStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def register(self, endpoint: Endpoint, most: int | None = None) -> bool:
        """Add `endpoint`, unless its workspace already has `most` (None: no limit). Whether it was added."""
        with self.engine.begin() as conn:
            if most is not None:
                # one workspace's registrations one at a time, across API processes: two at once could both
                # count `most` - 1 and both insert
                conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(f"webhooks:{endpoint.workspace_id}"))))
                held = conn.execute(
                    select(func.count()).where(endpoints.c.workspace_id == endpoint.workspace_id)
                ).scalar_one()
                if held >= most:
                    return False
            conn.execute(
                insert(endpoints).values(
                    endpoint_id=endpoint.endpoint_id,
                    workspace_id=endpoint.workspace_id,
                    url=endpoint.url,
                    secret=endpoint.secret,
                    event_types=sorted(endpoint.types),
                    created_at=datetime.now(UTC),
                )
            )
        return True

    def endpoints(self, workspace_id: str | None = None) -> list[Endpoint]:
        query = select(endpoints).order_by(endpoints.c.endpoint_id)
        if workspace_id is not None:
            query = query.where(endpoints.c.workspace_id == workspace_id)
        with self.engine.connect() as conn:
            return [
                Endpoint(r.endpoint_id, r.workspace_id, r.url, r.secret, frozenset(r.event_types))
                for r in conn.execute(query)
            ]

    def registered(self, workspace_id: str) -> list[tuple[Endpoint, datetime]]:
        """The workspace's endpoints, by id, with the time each was registered."""
        query = select(endpoints).where(endpoints.c.workspace_id == workspace_id).order_by(endpoints.c.endpoint_id)
        with self.engine.connect() as conn:
            return [
                (Endpoint(r.endpoint_id, r.workspace_id, r.url, r.secret, frozenset(r.event_types)), r.created_at)
                for r in conn.execute(query)
            ]

    def delete(self, endpoint_id: str) -> None:
        with self.engine.begin() as conn:
            for table in (endpoints, progress, dead_letters):
                conn.execute(delete(table).where(table.c.endpoint_id == endpoint_id))

    def cursor(self, endpoint_id: str) -> dict[Position, int]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(progress).where(progress.c.endpoint_id == endpoint_id))
            return {(r.topic, r.partition): r.next_offset for r in rows}

    def advance(self, endpoint_id: str, cursor: Mapping[Position, int], dead: DeadLetter | None = None) -> None:
        """Record that every event before `cursor` is done with (and `dead` given up on), atomically; nothing
        once the endpoint is deleted (its loop may finish a delivery after that)."""
        rows = [
            {"endpoint_id": endpoint_id, "topic": t, "partition": p, "next_offset": o} for (t, p), o in cursor.items()
        ]
        with self.engine.begin() as conn:
            # the endpoint's row held until this commits: a delete waits, then removes what is written here too;
            # written after a delete, progress and dead letters would outlive their webhook
            if not conn.execute(
                select(endpoints.c.endpoint_id).where(endpoints.c.endpoint_id == endpoint_id).with_for_update(read=True)
            ).first():
                return
            if rows:
                stmt = pg_insert(progress).values(rows)
                conn.execute(
                    stmt.on_conflict_do_update(
                        index_elements=["endpoint_id", "topic", "partition"],
                        set_={"next_offset": stmt.excluded.next_offset},
                    )
                )
            if dead is not None:
                conn.execute(
                    pg_insert(dead_letters).values(**vars(dead), dead_at=datetime.now(UTC)).on_conflict_do_nothing()
                )

    def dead_letters(self, endpoint_id: str) -> list[DeadLetter]:
        """All the endpoint's dead letters, oldest first (`dead_letter_page` for a bounded read)."""
        return [letter for letter, _ in self.dead_letter_page(endpoint_id)]

    def dead_letter_page(
        self, endpoint_id: str, after: tuple[datetime, str] | None = None, limit: int | None = None
    ) -> list[tuple[DeadLetter, datetime]]:
        """Up to `limit` dead letters (None: all) after the one that died at `after` (its time and event id),
        oldest first, each with when it was given up on."""
        query = select(dead_letters).where(dead_letters.c.endpoint_id == endpoint_id)
        if after is not None:
            query = query.where(tuple_(dead_letters.c.dead_at, dead_letters.c.event_id) > tuple_(*after))
        query = query.order_by(dead_letters.c.dead_at, dead_letters.c.event_id).limit(limit)
        with self.engine.connect() as conn:
            return [(_letter(r), r.dead_at) for r in conn.execute(query)]

    def dead_letter(self, endpoint_id: str, event_id: str) -> DeadLetter | None:
        """One dead letter of the endpoint, or None."""
        query = select(dead_letters).where(
            (dead_letters.c.endpoint_id == endpoint_id) & (dead_letters.c.event_id == event_id)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else _letter(row)

    def forget(self, endpoint_id: str, event_id: str) -> None:
        """A dead letter delivered on retry."""
        with self.engine.begin() as conn:
            conn.execute(
                delete(dead_letters).where(
                    (dead_letters.c.endpoint_id == endpoint_id) & (dead_letters.c.event_id == event_id)
                )
            )


def _letter(row) -> DeadLetter:
    return DeadLetter(row.endpoint_id, row.event_id, row.event_type, row.body, row.attempts, row.error)
