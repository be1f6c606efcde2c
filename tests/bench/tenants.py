#!/usr/bin/env python
"""A small workspace's message search beside a large one, through the service's own search statement
(projections.message_search.search_messages), on an embedded Postgres of its own.

    .venv/bin/python tests/bench/tenants.py [--others 300000] [--small 300] [--per-session 50] [--out F]

One HNSW index holds every workspace's vectors. The bench copies `--others` vectors into one workspace and
`--small` into another (sessions of `--per-session` messages each), builds the index, analyses, and runs 20
searches of the small workspace (limit 25, 100 candidates a list, a vector and no words) twice: with the
graph walked whatever the sizes (EXACT_SCAN_FACTOR 0, what a search confined to no session always did
before stop 60) and with the path search_path chooses. It reports how many rows each search returned,
how many candidates its semantic list held (of the 100 wanted), and its time. Vectors are drawn around one common direction, so that every pair has a cosine well above
0 as sentence embeddings do. JSON to stdout and --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from infra.postgres.embedded import EmbeddedPostgres  # noqa: E402
from projections import search_path  # noqa: E402
from projections.db import async_engine, create_schema, sync_engine  # noqa: E402
from projections.message_ranking import depth  # noqa: E402
from projections.message_search import search_messages, semantic  # noqa: E402
from projections.schema import ACTIVE_EMBEDDING_MODEL, EMBEDDING_DIMENSIONS  # noqa: E402
from projections.search_path import walk_settings_and_path  # noqa: E402
from projections.search_shape import MessageSearch, Shape, params  # noqa: E402
from projections.settings import DatabaseSettings  # noqa: E402
from tests.bench.derive import machine  # noqa: E402

SCHEMA = "bench"
COLUMNS = (
    "workspace_id, message_id, session_id, seq, peer_id, content, created_at, recorded_at, metadata, event_id, "
    "embedding, embedding_model"
)


def draw(rng: np.random.Generator, common: np.ndarray, k: int) -> np.ndarray:
    v = common + 1.2 * rng.standard_normal((k, EMBEDDING_DIMENSIONS))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def copy_in(conn: psycopg.Connection, workspace: str, vectors: np.ndarray, per_session: int) -> None:
    with conn.cursor().copy(f"COPY messages ({COLUMNS}) FROM STDIN") as copy:
        for i, v in enumerate(vectors):
            at = "2026-01-01T00:00:00Z"
            row = (workspace, f"{workspace}-{i}", f"s{i // per_session}", i, "p", "-", at, at, "{}", uuid.uuid4().hex)
            copy.write_row((*row, "[" + ",".join(f"{x:.5f}" for x in v) + "]", ACTIVE_EMBEDDING_MODEL))


def load(conn: psycopg.Connection, args, rng, common) -> dict:
    """The two workspaces' messages, sessions and counts, the index built after them (as a rebuild does)."""
    conn.execute(f"SET search_path TO {SCHEMA}, public")
    conn.execute("DROP INDEX messages_embedding")
    started = time.perf_counter()
    copy_in(conn, "others", draw(rng, common, args.others), 50)
    copy_in(conn, "small", draw(rng, common, args.small), args.per_session)
    copied = time.perf_counter() - started
    conn.execute("SET maintenance_work_mem = '2GB'")
    started = time.perf_counter()
    conn.execute("CREATE INDEX messages_embedding ON messages USING hnsw (embedding vector_cosine_ops)")
    indexed = time.perf_counter() - started
    conn.execute(
        "INSERT INTO sessions (workspace_id, session_id, metadata, created_at, message_count, event_id) "
        "SELECT workspace_id, session_id, '{}', now(), count(*), workspace_id || '/' || session_id FROM messages "
        "GROUP BY 1, 2"
    )
    conn.execute(
        "INSERT INTO message_lexicon (workspace_id, lexeme, docs, lexemes) "
        "SELECT workspace_id, '', count(*), 0 FROM messages GROUP BY 1"
    )
    conn.execute("VACUUM ANALYZE")
    return {"copy_s": round(copied, 1), "index_s": round(indexed, 1)}


async def candidates(conn, search: MessageSearch) -> int:
    """How many candidates the search's semantic list holds (of depth(limit) wanted), on the path it takes."""
    values, shape = params(search), Shape.of(search)
    exact, observed = await walk_settings_and_path(conn, shape, values)
    listed = semantic(replace(shape, exact=exact)).subquery()
    return (await conn.execute(select(func.count()).select_from(listed), {**values, **observed})).scalar_one()


async def searches(settings: DatabaseSettings, factor: float, queries: np.ndarray) -> dict:
    search_path.EXACT_SCAN_FACTOR = factor
    engine = async_engine(settings)
    rows, listed, times = [], [], []
    async with engine.connect() as conn:
        for q in queries:
            search = MessageSearch("small", "", list(q), limit=25)
            started = time.perf_counter()
            found = await search_messages(conn, search)
            times.append((time.perf_counter() - started) * 1000)
            rows.append(len(found))
            listed.append(await candidates(conn, search))
    await engine.dispose()
    times.sort()
    return {
        "rows_min": min(rows),
        "rows_mean": sum(rows) / len(rows),
        "candidates_wanted": depth(25),
        "candidates_min": min(listed),
        "candidates_mean": sum(listed) / len(listed),
        "p50_ms": round(times[len(times) // 2], 1),
        "max_ms": round(times[-1], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--others", type=int, default=300_000)
    parser.add_argument("--small", type=int, default=300)
    parser.add_argument("--per-session", type=int, default=50)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    common = rng.standard_normal(EMBEDDING_DIMENSIONS)
    chosen = search_path.EXACT_SCAN_FACTOR
    with tempfile.TemporaryDirectory(prefix="peerlog-tenants-") as root:
        pg = EmbeddedPostgres(Path(root) / "postgres", fast=True)
        pg.start()
        try:
            settings = DatabaseSettings(url=pg.url, schema_name=SCHEMA)
            create_schema(sync_engine(settings), SCHEMA)
            with psycopg.connect(pg.url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
                loaded = load(conn, args, rng, common)
            queries = draw(rng, common, 20)
            walked = asyncio.run(searches(settings, 0.0, queries))
            ruled = asyncio.run(searches(settings, chosen, queries))
        finally:
            pg.stop(immediate=True)
    result = {
        "bench": "tenants",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": " ".join(sys.argv),
        "others": args.others,
        "small": args.small,
        "per_session": args.per_session,
        **loaded,
        "graph_walked": walked,
        "path_chosen": ruled,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
