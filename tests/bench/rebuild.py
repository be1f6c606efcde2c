#!/usr/bin/env python
"""Rebuild benchmark: replay a large log into a fresh schema, verify it against the live one, switch.

    .venv/bin/python tests/bench/rebuild.py [--messages 100000] [--observations 200000] [--dir DIR] \
        [--keep] [--kill-after S] [--out tests/bench/results/rebuild.json]

Builds the read bench's workspace THROUGH THE LOG (tests/bench/read.py: sessions, messages with their
embeddings, observations with theirs; about 2 events per message and 1 per observation), waits for the
stack's live projector to project it, then runs `projections.rebuild.rebuild` as `peerlog projections
rebuild` would, with the live projector still running. Reports the events replayed, events/s end to end
and each phase apart (replay, index build, catch-up, verification, switch). A kept stack (--dir with
--keep) that already holds the workspace skips the build. The schema the rebuild retires is dropped
afterwards, so a kept stack does not grow by a copy per run.

With --kill-after S, each run first starts `peerlog projections rebuild` as its own process and SIGKILLs
it S seconds in, then rebuilds in this process, which carries on the build the killed one left: the run
reports the events each of the two applied, and how long the second took.

Prints one JSON object on stdout (progress on stderr) and writes it to --out.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from infra.stack import sql_dsn  # noqa: E402
from projections.rebuild import rebuild  # noqa: E402
from services import collector  # noqa: E402
from services.settings import Settings  # noqa: E402
from tests.bench import read  # noqa: E402
from tests.bench.ingest import machine  # noqa: E402


def log(msg: str) -> None:
    print(f"[rebuild-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def log_size(dsn: str) -> dict:
    with psycopg.connect(dsn, autocommit=True) as conn:
        offsets = conn.execute("SELECT sum(next_offset) FROM peerlog.projection_offsets").fetchone()[0]
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    return {"log_offsets": int(offsets or 0), "database_mib": round(size / 2**20)}


def drop_retired(dsn: str, schema: str | None) -> None:
    if schema:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def rebuild_process(env: dict, kill_after_s: float | None = None) -> tuple[int, list[str], float]:
    """`peerlog projections rebuild` as its own process with the stack's `env`, SIGKILLed `kill_after_s`
    seconds in unless it ends first: its exit status, the lines it printed, and how long it ran."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "projections", "rebuild"],
        env={**os.environ, **env},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=kill_after_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
    return proc.returncode, [line for line in out.splitlines() if line.strip()], time.monotonic() - started


def killed_rebuild(state, after_s: float) -> dict:
    """A rebuild of its own, SIGKILLed `after_s` seconds in."""
    status, said, _ = rebuild_process(state.env(), after_s)
    if status != -signal.SIGKILL:
        log("the rebuild to be killed ended on its own:\n" + "\n".join(said))
        return {"killed_after_s": None, "exit": status}
    log(f"killed the rebuild {after_s} s in; its last line: {said[-1] if said else '-'}")
    return {"killed_after_s": after_s, "last_progress": said[-1] if said else ""}


def run_rebuild(state, kill_after_s: float | None = None) -> dict:
    """One rebuild as the CLI runs it, in this process, with the stack's settings; with `kill_after_s`,
    after one killed that many seconds in."""
    os.environ.update(state.env())
    killed = killed_rebuild(state, kill_after_s) if kill_after_s else None
    started = time.monotonic()
    collector.tune()  # as the CLI's command does before it rebuilds
    report = rebuild(Settings(), progress=lambda m: log(f"{time.monotonic() - started:7.1f} s  {m}"))
    drop_retired(sql_dsn(state.database_url), report.retired)
    return {
        **({"killed_first": killed, "resumed": report.resumed} if killed else {}),
        "events": report.events,
        "seconds": round(report.seconds, 1),
        "events_per_s": round(report.events / report.seconds),
        "phases_s": {k: round(v, 1) for k, v in report.phases.items()},
        "switched": report.switched,
        "differing_rows": {t: n for t, n in report.differences.items() if n},
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--observations", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=1, help="rebuilds in a row (each replays the whole log)")
    ap.add_argument("--kill-after", type=float, help="kill a first rebuild this many seconds in, then carry it on")
    ap.add_argument("--dir", type=Path, help="stack directory (default: a fresh temp dir)")
    ap.add_argument("--keep", action="store_true", help="leave the stack running and its directory in place")
    ap.add_argument("--out", type=Path, default=ROOT / "tests/bench/results/rebuild.json")
    args = ap.parse_args(argv)
    # the read bench's workspace shape (peers, pairs, sessions, distinct texts) at this size
    defaults = read.parse_args(["--messages", str(args.messages), "--observations", str(args.observations)])
    return argparse.Namespace(**{**vars(defaults), **vars(args)})


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    with read.bench_stack(args, "peerlog-rebuild-bench-", keep=["projector"], progress=log) as state:
        log(f"building {args.messages} messages and {args.observations} observations through the log")
        built = read.build(state, args)
        runs = [run_rebuild(state, args.kill_after) for _ in range(args.runs)]
        read.emit(
            {
                "benchmark": "rebuild",
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "command": shlex.join([".venv/bin/python", str(Path(__file__).relative_to(ROOT)), *argv]),
                "machine": machine(),
                "workspace": {
                    "messages": args.messages,
                    "observations": args.observations,
                    **log_size(sql_dsn(state.database_url)),
                },
                "setup": built["timings"],
                "target_events_per_s": 40_000,
                "runs": runs,
            },
            args.out,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
