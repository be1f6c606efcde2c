#!/usr/bin/env python
"""The named-peer lookup (projections/lexical_terms.named_peers, which every search runs twice: for the
text it embeds and inside its statement) among many peers, in SQL alone.

    .venv/bin/python tests/bench/named_peers.py --dir D [--peers 20000] [--out F]

D is a running stack (`peerlog dev up --dir D`). The bench adds `--peers` peers to a workspace of its
own, by SQL (a lookup of peers, not a write path, is measured), with ids "user_1" … "user_N" as an app's
user ids are, every 1,000th of them with a display name ("Name1000 Lopez"). It times the lookup, 100 runs
after 10, for four questions: one saying the ids' common word ("user"), one naming no peer, one naming a
peer by its whole id ("user 42") and one saying a word of the display names ("Lopez"). Each is timed
right after the insert (a GIN index's pending list not yet merged) and after a VACUUM, under a generic
plan (as a search's statement runs, plan_cache_mode force_generic_plan) and under Postgres's own choice.
It deletes its peers at the end. JSON to stdout and --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sqlalchemy import select, text  # noqa: E402

from infra.stack import load_state  # noqa: E402
from projections.db import sync_engine  # noqa: E402
from projections.lexical_terms import named_peers  # noqa: E402
from projections.settings import DatabaseSettings  # noqa: E402
from tests.bench.derive import machine  # noqa: E402

WORKSPACE = "bench-named-peers"
QUESTIONS = (
    "what did the user say about the garden",
    "what did Ann say about the garden",
    "what did user 42 say",
    "what did Lopez say",
)


def _add_peers(conn, n: int) -> None:
    conn.execute(
        text(
            "INSERT INTO peers (workspace_id, peer_id, observe_me, metadata, created_at, event_id) "
            "SELECT :w, 'user_' || g, true, CASE WHEN g % 1000 = 0 THEN "
            "jsonb_build_object('name', 'Name' || g || ' Lopez') ELSE '{}' END, now(), :w || '-' || g "
            "FROM generate_series(1, :n) g"
        ),
        {"w": WORKSPACE, "n": n},
    )
    conn.execute(text("ANALYZE peers"))


def _time(conn, question: str) -> dict:
    stmt = select(named_peers().c.peer_id)
    values = {"workspace_id": WORKSPACE, "q": question}
    for _ in range(10):
        conn.execute(stmt, values).all()
    started = time.perf_counter()
    for _ in range(100):
        found = conn.execute(stmt, values).all()
    return {"ms": round((time.perf_counter() - started) * 10, 3), "peers_named": len(found)}


def measure(conn, label: str) -> dict:
    out = {}
    for mode in ("force_generic_plan", "auto"):
        conn.execute(text(f"SET plan_cache_mode = {mode}"))
        out[mode] = {q: _time(conn, q) for q in QUESTIONS}
        for q, r in out[mode].items():
            print(f"{label:9} {mode:18} {q:40} {r['ms']:7.3f} ms  {r['peers_named']} named", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path, required=True, help="a running stack's directory")
    ap.add_argument("--peers", type=int, default=20_000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    engine = sync_engine(DatabaseSettings(url=load_state(args.dir).database_url))
    result = {
        "benchmark": "named-peers",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": " ".join(["tests/bench/named_peers.py", *sys.argv[1:]]),
        "peers": args.peers,
    }
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("DELETE FROM peers WHERE workspace_id = :w"), {"w": WORKSPACE})
        try:
            _add_peers(conn, args.peers)
            result["just_inserted"] = measure(conn, "inserted")
            conn.execute(text("VACUUM peers"))
            result["vacuumed"] = measure(conn, "vacuumed")
        finally:
            conn.execute(text("DELETE FROM peers WHERE workspace_id = :w"), {"w": WORKSPACE})
            conn.execute(text("VACUUM peers"))
    engine.dispose()
    body = json.dumps(result, indent=2)
    print(body)
    if args.out:
        args.out.write_text(body + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
