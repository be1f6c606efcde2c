"""One peer in every session: how a search under a perspective fares when one peer of the workspace (an
assistant) is a member of tens of thousands of sessions, for that peer and for the others.

    .venv/bin/python tests/bench/assistant.py --dir D [--sessions 50000] [--rounds 3] [--out F]

Needs a stack kept by `tests/bench/read.py --dir D --keep` (its workspace, 40 peers in about 43 sessions
each); it starts whatever part of that stack is not running. It times `search_messages` as GetContext
calls it (a perspective, limits 12 and 50, in a read-only snapshot, the read bench's queries embedded
once) for two observers: `--assistant` (default p3) and `--other` (p5). First as the stack is, then with
`--sessions` empty sessions added by SQL with the assistant a member of all of them (rows the log does
not hold: deleted again at the end, whatever happens). Medians per observer and limit, in ms; one JSON
object on stdout, also written to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from infra import stack  # noqa: E402
from infra.stack import sql_dsn  # noqa: E402
from projections.db import async_engine  # noqa: E402
from projections.message_search import search_messages  # noqa: E402
from projections.search_shape import MessageSearch  # noqa: E402
from projections.settings import DatabaseSettings  # noqa: E402
from services.llm.embeddings import LocalOnnxEmbedder  # noqa: E402
from tests.bench.ingest import machine  # noqa: E402
from tests.bench.read import QUERIES, WORKSPACE, refuse_another_model  # noqa: E402

LIMITS = (12, 50)  # GetContext's relevant section at 2,000 tokens asks about 12; at 4,000 tokens, more
CROWD = "bench-assistant-"  # the added rows' ids begin with it


def log(msg: str) -> None:
    print(f"[assistant-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def add_sessions(dsn: str, n: int, peer: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SET search_path TO peerlog, public")
        c.execute(
            "INSERT INTO sessions (workspace_id, session_id, metadata, created_at, message_count, event_id) "
            "SELECT %s, %s || g, '{}'::jsonb, now(), 0, %s || 'event-' || g FROM generate_series(1, %s) g",
            (WORKSPACE, CROWD, CROWD, n),
        )
        c.execute(
            "INSERT INTO memberships (joined_event_id, workspace_id, session_id, peer_id, observe_me, "
            "observe_others, joined_at, joined_after_seq) "
            "SELECT %s || 'join-' || g, %s, %s || g, %s, NULL, true, now(), 0 FROM generate_series(1, %s) g",
            (CROWD, WORKSPACE, CROWD, peer, n),
        )
        c.execute("ANALYZE memberships")  # what autovacuum would do after such a change
        c.execute("ANALYZE sessions")


def remove_sessions(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SET search_path TO peerlog, public")
        c.execute("DELETE FROM memberships WHERE joined_event_id LIKE %s", (CROWD + "%",))
        c.execute("DELETE FROM sessions WHERE workspace_id = %s AND session_id LIKE %s", (WORKSPACE, CROWD + "%"))
        c.execute("ANALYZE memberships")
        c.execute("ANALYZE sessions")


async def timed(url: str, observers: list[str], rounds: int, vectors) -> dict:
    """Median ms of search_messages per observer and limit."""
    engine = async_engine(DatabaseSettings(url=url))
    try:
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
            return {
                f"{observer} limit {limit}": await _median_ms(conn, observer, limit, rounds, vectors)
                for observer in observers
                for limit in LIMITS
            }
    finally:
        await engine.dispose()


async def _median_ms(conn, observer: str, limit: int, rounds: int, vectors) -> float:
    """Each query searched once per round, each in its own snapshot; the first round warms up, uncounted."""
    times = []
    for r in range(rounds + 1):
        for query, vector in zip(QUERIES, vectors, strict=True):
            search = MessageSearch(WORKSPACE, query, vector, perspective_id=observer, limit=limit)
            async with conn.begin():
                started = time.perf_counter()
                await search_messages(conn, search)
                if r:
                    times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 2)


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, required=True, help="a stack kept by read.py --keep")
    ap.add_argument("--sessions", type=int, default=50_000)
    ap.add_argument("--assistant", default="p3")
    ap.add_argument("--other", default="p5")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    state = stack.up(args.dir, progress=log)
    dsn = sql_dsn(state.database_url)
    refuse_another_model(state.database_url)
    vectors = LocalOnnxEmbedder().embed_sync(QUERIES)
    observers = [args.assistant, args.other]
    log("as the stack is")
    plain = asyncio.run(timed(state.database_url, observers, args.rounds, vectors))
    log(f"with {args.assistant} in {args.sessions} more sessions")
    add_sessions(dsn, args.sessions, args.assistant)
    try:
        crowded = asyncio.run(timed(state.database_url, observers, args.rounds, vectors))
    finally:
        remove_sessions(dsn)
    result = {
        "benchmark": "assistant",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([".venv/bin/python", str(Path(__file__).relative_to(ROOT)), *argv]),
        "machine": machine(),
        "queries": len(QUERIES),
        "rounds": args.rounds,
        "median_ms": {"as kept": plain, f"{args.assistant} in {args.sessions} more sessions": crowded},
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
