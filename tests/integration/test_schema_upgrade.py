"""A projection schema made by an older version is brought to this one's shape at start (create_schema)."""

from __future__ import annotations

from sqlalchemy import text

from projections.db import create_schema, sync_engine


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
        assert "peers_by_name" in indexes
    finally:
        engine.dispose()
