"""A projection schema made by an older version is brought to this one's shape at start (create_schema)."""

from __future__ import annotations

from sqlalchemy import text

from projections.db import create_schema, sync_engine
from projections.rebuild import compare


def _columns(conn, schema: str, table: str) -> set[str]:
    found = conn.execute(
        text("SELECT column_name FROM information_schema.columns WHERE table_schema = :s AND table_name = :t"),
        {"s": schema, "t": table},
    )
    return set(found.scalars())


def _indexes(conn, schema: str) -> set[str]:
    return set(conn.execute(text("SELECT indexname FROM pg_indexes WHERE schemaname = :s"), {"s": schema}).scalars())


def test_an_older_schemas_unread_observation_search_column_and_indexes_are_dropped_at_start(settings):
    schema = settings.database.schema_name
    engine = sync_engine(settings.database)
    try:
        create_schema(engine, schema)
        with engine.begin() as conn:  # what the schema of the previous version had over observations
            t = f'"{schema}".observations'
            conn.execute(
                text(
                    f"ALTER TABLE {t} ADD COLUMN content_tsv tsvector "
                    "GENERATED ALWAYS AS (to_tsvector('english', content)) STORED"
                )
            )
            conn.execute(text(f"CREATE INDEX observations_fts ON {t} USING gin (content_tsv)"))
            conn.execute(text(f"CREATE INDEX observations_embedding ON {t} USING hnsw (embedding vector_cosine_ops)"))
        create_schema(engine, schema)
        create_schema(engine, schema)  # and a later start finds nothing left to drop
        with engine.connect() as conn:
            assert "content_tsv" not in _columns(conn, schema, "observations")
            assert "content_tsv" in _columns(conn, schema, "messages")  # what message search reads stays
            indexes = _indexes(conn, schema)
        assert not {"observations_fts", "observations_embedding"} & indexes
        assert {"messages_embedding", "observations_by_pair_ranked"} <= indexes
    finally:
        engine.dispose()


def test_an_older_schemas_peers_get_their_name_lexemes_and_its_index_at_start(settings):
    schema = settings.database.schema_name
    engine = sync_engine(settings.database)
    try:
        create_schema(engine, schema)
        with engine.begin() as conn:  # peers as the previous version wrote them, without the column
            conn.execute(text(f'ALTER TABLE "{schema}".peers DROP COLUMN name_lexemes'))
            for peer in ("Ann_Lee", "the", "bo-42"):
                conn.execute(
                    text(
                        f'INSERT INTO "{schema}".peers (workspace_id, peer_id, observe_me, metadata, created_at, '
                        "event_id) VALUES ('w', :p, true, '{}', now(), :p)"
                    ),
                    {"p": peer},
                )
        create_schema(engine, schema)
        create_schema(engine, schema)  # a later start finds it there
        with engine.connect() as conn:
            found = conn.execute(text(f'SELECT peer_id, name_lexemes FROM "{schema}".peers ORDER BY peer_id'))
            lexemes = {peer: sorted(words) if words else None for peer, words in found}
            indexes = _indexes(conn, schema)
        # the words of each id, stemmed; an id of nothing but stop words names no one
        assert lexemes == {"Ann_Lee": ["ann", "lee"], "bo-42": ["42", "bo"], "the": None}
        assert {"peers_by_first_lexeme", "peers_by_display_name"} <= indexes
    finally:
        engine.dispose()


OLD_MESSAGE_TSV = "to_tsvector('english', replace(peer_id, '_', ' ') || ' ' || content)"
OLD_PEER_NAME_LEXEMES = "nullif(tsvector_to_array(to_tsvector('english', translate(peer_id, '_-', '  '))), '{}')"


def _as_before_display_names(conn, schema: str) -> None:
    """Peers and messages as the version before display names made them: one GIN index over every
    peer's lexemes."""
    for index in ("peers_by_first_lexeme", "peers_by_display_name"):
        conn.execute(text(f'DROP INDEX "{schema}"."{index}"'))
    conn.execute(text(f'CREATE INDEX peers_by_name ON "{schema}".peers USING gin (name_lexemes)'))
    conn.execute(
        text(f'ALTER TABLE "{schema}".peers ALTER COLUMN name_lexemes SET EXPRESSION AS ({OLD_PEER_NAME_LEXEMES})')
    )
    conn.execute(
        text(f'ALTER TABLE "{schema}".messages ALTER COLUMN content_tsv SET EXPRESSION AS ({OLD_MESSAGE_TSV})')
    )
    conn.execute(text(f'ALTER TABLE "{schema}".messages DROP COLUMN author_name'))


def test_an_older_schema_names_peers_by_display_name_at_start_and_leaves_its_messages_to_a_rebuild(settings, caplog):
    schema = settings.database.schema_name
    engine = sync_engine(settings.database)
    try:
        create_schema(engine, schema)
        with engine.begin() as conn:
            _as_before_display_names(conn, schema)
            conn.execute(
                text(
                    f'INSERT INTO "{schema}".peers (workspace_id, peer_id, observe_me, metadata, created_at, event_id) '
                    """VALUES ('w', 'u-7f3a', true, '{"name": "Maria Lopez"}', now(), 'e1')"""
                )
            )
        create_schema(engine, schema)
        create_schema(engine, schema)  # a later start finds the peers' expression in place
        with engine.connect() as conn:
            lexemes = conn.execute(text(f'SELECT name_lexemes FROM "{schema}".peers')).scalar_one()
            assert "author_name" in _columns(conn, schema, "messages")
            indexes = _indexes(conn, schema)
            tsv = conn.execute(
                text("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = to_regclass(:t)"),
                {"t": f'"{schema}".messages'},
            ).scalar_one()
        assert sorted(lexemes) == ["lopez", "maria"]
        assert {"peers_by_first_lexeme", "peers_by_display_name"} <= indexes and "peers_by_name" not in indexes
        # every message rewritten at start is what a rebuild does beside the serving schema: not done here
        assert "author_name" not in tsv
        assert "projections rebuild" in caplog.text
    finally:
        engine.dispose()


def test_a_rebuilds_comparison_reads_the_rows_not_the_expressions_their_generated_columns_had(settings):
    live, build = settings.database.schema_name, f"{settings.database.schema_name}_build"
    engine = sync_engine(settings.database)
    row = (
        "INSERT INTO {}.messages (workspace_id, message_id, session_id, seq, peer_id, author_name, content, "
        "created_at, recorded_at, metadata, event_id) VALUES ('w', 'm1', 's', 1, 'u-7f3a', 'Maria Lopez', "
        "'I finished the quilt', now(), now(), '{{}}', 'e1')"
    )
    try:
        for schema in (live, build):
            create_schema(engine, schema)
        with engine.begin() as conn:
            _as_before_display_names(conn, live)
            conn.execute(text(f'ALTER TABLE "{live}".messages ADD COLUMN author_name text'))
            for schema in (live, build):
                conn.execute(text(row.format(f'"{schema}"')))
            assert compare(conn, live, build)["messages"] == 0
            conn.execute(text(f"UPDATE \"{live}\".messages SET author_name = 'Maria'"))
            assert compare(conn, live, build)["messages"] == 2  # a difference of data still counts
    finally:
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{build}" CASCADE'))
        engine.dispose()


def test_an_older_schemas_client_observations_are_restamped_in_every_derivation_once_at_start(settings):
    schema = settings.database.schema_name
    engine = sync_engine(settings.database)
    row = (
        f'INSERT INTO "{schema}".observations (workspace_id, observation_id, observer_id, observed_id, level, '
        "content, content_key, embedding_model, times_derived, created_at, batch_id, dream_id, derivation, "
        "event_id) VALUES ('w', :id, 'a', 'b', 'explicit', :id, :id, '', 1, now(), :batch, :dream, :derivation, :id)"
    )
    try:
        create_schema(engine, schema)
        with engine.begin() as conn:  # as the version before ObservationAdded v3 stamped them
            conn.execute(text(f'ALTER TABLE "{schema}".projection_meta DROP COLUMN client_writes_pair_wide'))
            for oid, batch, dream, derivation in (
                ("client-original", None, None, ""),
                ("client-v2", None, None, "v2"),
                ("derived", "b1", None, "v2"),
                ("dreamt", None, "d1", ""),
            ):
                conn.execute(text(row), dict(id=oid, batch=batch, dream=dream, derivation=derivation))
        create_schema(engine, schema)
        with engine.begin() as conn:  # a later start scans nothing: a row stamped now is left as it is
            conn.execute(text(row), dict(id="later", batch=None, dream=None, derivation=""))
        create_schema(engine, schema)
        with engine.connect() as conn:
            stamped = dict(conn.execute(text(f'SELECT observation_id, derivation FROM "{schema}".observations')).all())
        assert stamped == {"client-original": "*", "client-v2": "*", "derived": "v2", "dreamt": "", "later": ""}
    finally:
        engine.dispose()
