"""A deployment whose embedding model gives more than 384 dimensions: its vectors are projected (a vector
of 768 float32 is 3,080 bytes, past the 2,704 a btree entry holds, so it stays out of the covering indexes)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# run in a process of its own: the projection schema takes its vector size from the setting at import
SCRIPT = """
import sys
from datetime import UTC, datetime
from sqlalchemy import text
from projections.db import create_schema, sync_engine
from projections.schema import VECTOR_IN_INDEXES
from projections.settings import DatabaseSettings

schema = sys.argv[1]
engine = sync_engine(DatabaseSettings(), schema)
create_schema(engine, schema)
vector = "[" + ",".join(["0.05"] * 768) + "]"
long_id = "p" * 512
with engine.begin() as conn:
    conn.execute(text(
        f'INSERT INTO "{schema}".observations (workspace_id, observation_id, observer_id, observed_id, level, '
        "content, content_key, embedding, embedding_model, times_derived, created_at, event_id) VALUES "
        "(:w, 'o1', :p, :p, 'explicit', 'keeps bees', 'keeps bees', CAST(:e AS vector), 'wide', 1, :t, 'e1')"
    ), {"w": long_id, "p": long_id, "e": vector, "t": datetime.now(UTC)})
    conn.execute(text(
        f'INSERT INTO "{schema}".messages (workspace_id, session_id, message_id, seq, peer_id, content, '
        "created_at, recorded_at, metadata, event_id, embedding, embedding_model) VALUES "
        "(:w, :w, :w, 1, 'bob', 'I keep bees', :t, :t, '{}', 'e2', CAST(:e AS vector), 'wide')"
    ), {"w": long_id, "e": vector, "t": datetime.now(UTC)})
with engine.connect() as conn:
    n = conn.execute(text(f'SELECT count(*) FROM "{schema}".observations WHERE embedding IS NOT NULL')).scalar()
    m = conn.execute(text(f'SELECT count(*) FROM "{schema}".messages WHERE embedding IS NOT NULL')).scalar()
print(VECTOR_IN_INDEXES, n, m)
"""


def test_a_768_dimension_vector_is_projected_beside_ids_of_512_characters(settings):
    schema = f"dims_{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "PEERLOG_EMBEDDING_DIMENSIONS": "768",
        "PEERLOG_DATABASE_URL": settings.database.url,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "gen")]),
    }
    done = subprocess.run([sys.executable, "-c", SCRIPT, schema], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "1", "1"]
