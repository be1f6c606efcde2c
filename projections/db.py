"""Engines bound to a projection schema, and creating that schema."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Collection

import psycopg
from sqlalchemy import Connection, Engine, Index, create_engine, event, exists, insert, select, text
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from projections.schema import (
    PEER_NAME_LEXEMES,
    RETIRED_COLUMNS,
    RETIRED_INDEXES,
    message_terms,
    messages,
    metadata,
    projection_meta,
    scope_members,
)
from projections.scope_reads import members_by_history
from projections.settings import DatabaseSettings
from services.events import PAIR_WIDE

log = logging.getLogger(__name__)


def mapped_schema(connectable: Connection | Engine) -> str | None:
    """The schema the tables resolve to on `connectable` (its schema_translate_map, set by the engines
    below and by a rebuild); None: the search path's."""
    return (connectable.get_execution_options().get("schema_translate_map") or {}).get(None)


def sync_engine(settings: DatabaseSettings, schema: str | None = None) -> Engine:
    """A blocking engine whose tables resolve to `schema` (default: the serving schema)."""
    engine = create_engine(settings.url, pool_size=4, pool_pre_ping=True, **settings.engine_args())
    return engine.execution_options(schema_translate_map={None: schema or settings.schema_name})


def async_engine(settings: DatabaseSettings) -> AsyncEngine:
    """An asyncio engine for readers (the API, the dreamer), reading the serving schema.

    Autocommit: a read needs no BEGIN and ROLLBACK round trips around it, and under READ COMMITTED
    each statement saw its own snapshot anyway."""
    engine = create_async_engine(
        settings.url, pool_size=settings.pool_size, isolation_level="AUTOCOMMIT", **settings.engine_args()
    )
    event.listen(engine.sync_engine.pool, "checkin", _note_checkin)
    event.listen(engine.sync_engine.pool, "checkout", _ready)
    return engine.execution_options(schema_translate_map={None: settings.schema_name})


# Connection.info key: a statement set plan_cache_mode on this connection (message_search does, for its
# own statement, when outside a transaction), to be reset before the connection serves another read
GENERIC_PLANS = "peerlog.generic_plans"


# A pooled connection is pinged before use only when it sat idle this long. pool_pre_ping would ping at
# every checkout: a round trip that cost 7 % of the API's CPU per search, for connections a busy server
# used milliseconds before. A connection that broke meanwhile (Postgres restarted) fails its statement
# with UNAVAILABLE, which clients retry, and SQLAlchemy then replaces every connection of the pool.
PING_AFTER_IDLE_S = 2.0
_CHECKED_IN = "peerlog.checked_in"


def _note_checkin(_dbapi_connection, record) -> None:
    record.info[_CHECKED_IN] = time.monotonic()


def _ready(dbapi_connection, record, _proxy) -> None:
    """Make a borrowed connection ready: back to Postgres's own choice of plan when a search set it
    (at checkout, not checkin: the connection is then in autocommit, where no rollback of a snapshot's
    transaction can undo the RESET), else a ping after an idle spell. Either round trip proves it alive;
    a dead one is replaced (DisconnectionError makes the pool take another)."""
    if record.info.pop(GENERIC_PLANS, False):
        sql = "RESET plan_cache_mode"
    elif time.monotonic() - record.info.get(_CHECKED_IN, 0.0) > PING_AFTER_IDLE_S:
        sql = "SELECT 1"
    else:
        return
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(sql)
    except psycopg.OperationalError as e:
        raise DisconnectionError(f"a pooled connection is gone: {e}") from e
    finally:
        cursor.close()


def schema_exists(conn: Connection, schema: str) -> bool:
    found = conn.execute(text("SELECT 1 FROM information_schema.schemata WHERE schema_name = :s"), {"s": schema})
    return found.first() is not None


def _upgrade_indexes(conn: Connection, schema: str, left_out: set[str]) -> None:
    """Bring a schema created by an older version to today's indexes, but those `left_out` (by name):
    create_all adds none to a table that already exists. The left-out ones are dropped where create_all
    made them (over the empty tables it created: at no cost) or a rebuild that died building them left them."""
    for name in (*RETIRED_INDEXES, *sorted(left_out)):
        conn.execute(text(f'DROP INDEX IF EXISTS "{schema}"."{name}"'))
    for table in metadata.sorted_tables:
        for index in table.indexes:
            if index.name not in left_out:
                index.create(conn, checkfirst=True)


def _drop_retired_columns(conn: Connection, schema: str) -> None:
    """Drop the columns an older version's schema has and this one's does not (RETIRED_COLUMNS); looked up
    first, so a later start takes no ALTER TABLE lock."""
    for table, names in RETIRED_COLUMNS.items():
        present = conn.execute(
            text(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = :s AND table_name = :t "
                "AND column_name = ANY(:names)"
            ),
            {"s": schema, "t": table, "names": list(names)},
        ).scalars()
        for name in present:
            conn.execute(text(f'ALTER TABLE "{schema}"."{table}" DROP COLUMN "{name}"'))


def _backfill_terms(conn: Connection) -> None:
    """A schema made before message_terms existed gets its messages copied there once (the projector
    keeps it from then on); any other time the table is filled already, or there are no messages."""
    columns = [c.name for c in message_terms.c]
    conn.execute(
        insert(message_terms).from_select(
            columns, select(*(messages.c[c] for c in columns)).where(~exists(select(message_terms.c.message_id)))
        )
    )


def _has_table(conn: Connection, schema: str, table: str) -> bool:
    return conn.execute(text("SELECT to_regclass(:t)"), {"t": f'"{schema}"."{table}"'}).scalar() is not None


def _backfill_scope_members(conn: Connection) -> None:
    """A schema from before scope_members gets each scope's sessions now computed from its history, once
    (create_all has just made the table; the projector keeps it from then on)."""
    conn.execute(insert(scope_members).from_select([c.name for c in scope_members.c], members_by_history()))


def _has_column(conn: Connection, schema: str, table: str, column: str) -> bool:
    found = conn.execute(
        text(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = :s AND table_name = :t AND column_name = :c"
        ),
        {"s": schema, "t": table, "c": column},
    )
    return found.first() is not None


def _generated_by(conn: Connection, schema: str, table: str, column: str) -> str:
    """The expression a generated column is computed by, as Postgres prints it ('' if none)."""
    found = conn.execute(
        text(
            "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a "
            "ON a.attrelid = d.adrelid AND a.attnum = d.adnum WHERE d.adrelid = to_regclass(:t) AND a.attname = :c"
        ),
        {"t": f'"{schema}"."{table}"', "c": column},
    )
    return found.scalar() or ""


def _upgrade_peers(conn: Connection, schema: str) -> None:
    """A schema from before peers.name_lexemes gets the column, and one from before display names gets
    its expression (PEER_NAME_LEXEMES), computed for every peer once (the table is rewritten; peers are
    few beside messages); its index follows in _upgrade_indexes."""
    t = f'"{schema}".peers'
    if not _has_column(conn, schema, "peers", "name_lexemes"):
        conn.execute(
            text(f"ALTER TABLE {t} ADD COLUMN name_lexemes text[] GENERATED ALWAYS AS ({PEER_NAME_LEXEMES}) STORED")
        )
    elif "metadata" not in _generated_by(conn, schema, "peers", "name_lexemes"):
        conn.execute(text(f"ALTER TABLE {t} ALTER COLUMN name_lexemes SET EXPRESSION AS ({PEER_NAME_LEXEMES})"))
    else:
        return  # every later start: no ALTER TABLE (an exclusive lock)
    conn.execute(text(f"ANALYZE {t}"))  # searches plan with the new column's statistics at once


def _upgrade_messages(conn: Connection, schema: str) -> None:
    """A schema from before display names gets messages.author_name. Its content_tsv keeps the older
    expression (the author's id as words) until a rebuild: setting it here would rewrite every message
    and its indexes under an exclusive lock at start, where `peerlog projections rebuild` builds the new
    schema beside the one serving."""
    if not _has_column(conn, schema, "messages", "author_name"):
        conn.execute(text(f'ALTER TABLE "{schema}".messages ADD COLUMN author_name text'))
    if "author_name" not in _generated_by(conn, schema, "messages", "content_tsv"):
        log.warning(
            "schema %s indexes a message's author by its peer id only: peers' display names (metadata "
            "`name`) are embedded with new messages, and full-text search matches them once "
            "`peerlog projections rebuild` has run",
            schema,
        )


def _upgrade_member_others(conn: Connection, schema: str) -> None:
    """A schema from before MemberJoined v2 holds false where a member did not say whether it observes the
    others (version 1 could not tell), which is NULL now, as replaying those events gives; once."""
    nullable = conn.execute(
        text(
            "SELECT is_nullable FROM information_schema.columns WHERE table_schema = :s AND table_name = "
            "'memberships' AND column_name = 'observe_others'"
        ),
        {"s": schema},
    ).scalar()
    if nullable != "NO":
        return  # every later start: no ALTER TABLE (an exclusive lock) and no scan of the table
    t = f'"{schema}".memberships'
    conn.execute(text(f"ALTER TABLE {t} ALTER COLUMN observe_others DROP NOT NULL"))
    conn.execute(text(f"UPDATE {t} SET observe_others = NULL WHERE NOT observe_others"))


def _upgrade_memberships(conn: Connection, schema: str) -> None:
    """A schema from before visibility followed log order gets its membership periods as seqs, once,
    by the wall-clock rule it was read by until then (memberships.joined_after_seq)."""
    if _has_column(conn, schema, "memberships", "joined_after_seq"):
        return  # every later start: no ALTER TABLE (an exclusive lock) and no scan of the table
    t = f'"{schema}".memberships'
    conn.execute(text(f"ALTER TABLE {t} ADD COLUMN joined_after_seq bigint, ADD COLUMN left_after_seq bigint"))
    last_before = (
        f'SELECT coalesce(max(m.seq), 0) FROM "{schema}".messages m WHERE m.workspace_id = '
        "ms.workspace_id AND m.session_id = ms.session_id AND m.recorded_at {op} ms.{col}"
    )
    conn.execute(
        text(
            f"UPDATE {t} ms SET joined_after_seq = ({last_before.format(op='<', col='joined_at')}), "
            f"left_after_seq = CASE WHEN ms.left_at IS NOT NULL THEN "
            f"({last_before.format(op='<=', col='left_at')}) END"
        )
    )
    conn.execute(text(f"ALTER TABLE {t} ALTER COLUMN joined_after_seq SET NOT NULL"))


def _upgrade_dead_letters(conn: Connection, schema: str) -> None:
    """A schema from before summary dead letters kept their kind, or whether their messages were dropped,
    gets the column (its rows stay NULL, and not dropped: what they were cannot be told any more)."""
    if not _has_column(conn, schema, "dead_letters", "summary_kind"):
        conn.execute(text(f'ALTER TABLE "{schema}".dead_letters ADD COLUMN summary_kind text'))
    if not _has_column(conn, schema, "dead_letters", "summary_dropped"):
        conn.execute(
            text(f'ALTER TABLE "{schema}".dead_letters ADD COLUMN summary_dropped boolean NOT NULL DEFAULT false')
        )


def _upgrade_peer_cards(conn: Connection, schema: str) -> None:
    """A schema from before a card kept who set it gets the columns (NULL in its rows until a rebuild)."""
    if not _has_column(conn, schema, "peer_cards", "producer"):
        conn.execute(text(f'ALTER TABLE "{schema}".peer_cards ADD COLUMN producer jsonb, ADD COLUMN dream_id text'))


def _upgrade_client_observations(conn: Connection, schema: str) -> None:
    """A schema from before ObservationAdded v3 stamped each client's observation with the derivation
    current when it was written; it is restamped PAIR_WIDE once, as replaying its events now does."""
    if _has_column(conn, schema, "projection_meta", "client_writes_pair_wide"):
        return  # every later start: no scan of the observations
    conn.execute(
        text(
            f'UPDATE "{schema}".observations SET derivation = :pair_wide '
            "WHERE batch_id IS NULL AND dream_id IS NULL AND derivation <> :pair_wide"
        ),
        {"pair_wide": PAIR_WIDE},
    )
    conn.execute(
        text(f'ALTER TABLE "{schema}".projection_meta ADD COLUMN client_writes_pair_wide boolean NOT NULL DEFAULT true')
    )


def create_schema(engine: Engine, schema: str, without: Collection[Index] = ()) -> None:
    """Create `schema` and every projection table in it, if missing, with every index but those `without`
    (a rebuild's build leaves out the ones it builds once its replay has caught up)."""
    left_out = {index.name for index in without}
    with engine.begin() as conn:
        # the projector and the API may both create it at start: serialise them
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:s))"), {"s": f"peerlog-schema:{schema}"})
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
        mapped = conn.execution_options(schema_translate_map={None: schema})
        had_scope_members = _has_table(mapped, schema, scope_members.name)
        metadata.create_all(mapped)
        if not had_scope_members:
            _backfill_scope_members(mapped)
        _upgrade_peers(mapped, schema)
        _upgrade_messages(mapped, schema)
        _upgrade_indexes(mapped, schema, left_out)
        _drop_retired_columns(mapped, schema)
        _upgrade_memberships(mapped, schema)
        _upgrade_member_others(mapped, schema)
        _upgrade_dead_letters(mapped, schema)
        _upgrade_peer_cards(mapped, schema)
        _upgrade_client_observations(mapped, schema)
        _backfill_terms(mapped)
        if mapped.execute(projection_meta.select()).first() is None:
            mapped.execute(projection_meta.insert().values(generation=uuid.uuid4().hex))
