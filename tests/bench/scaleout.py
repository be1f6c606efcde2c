#!/usr/bin/env python
"""Derivation throughput with 1 and then 2 worker processes, the test model answering after --delay-ms.

    .venv/bin/python tests/bench/scaleout.py [--messages 1000] [--sessions 20] [--delay-ms 200]

One local stack (infra.stack). Phase `1 worker`: --messages are added at once (batches of 10 over
--sessions sessions, two peers each) to a fresh workspace, and the time from the first add until
every message is derived is measured, with the deriver's model calls it took. Phase `2 workers`: a
second `peerlog worker` joins the consumer groups, then the same load goes to another fresh workspace.
Prints JSON and writes --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from infra.stack import PROCESSES, down, sql_dsn, up  # noqa: E402
from tests.bench.chaos import Load, derived_ids, log, model_reply, seed_pairs  # noqa: E402
from tests.bench.ingest import machine, pin_fresh_ports  # noqa: E402
from tests.support.extractor import is_deriver  # noqa: E402
from tests.support.model_server import ModelServer  # noqa: E402


def deriver_calls(server: ModelServer) -> int:
    return sum(1 for r in server.chat_requests() if is_deriver(r))


async def phase(state, args, server: ModelServer) -> dict:
    workspace, sessions = await seed_pairs(state, "scale", args.sessions)
    calls_before = deriver_calls(server)
    load = Load(state, workspace, sessions, 0, 10)
    started = time.monotonic()
    await load.run(args.messages)
    acked_s = time.monotonic() - started
    ids = set(load.acked.values())
    dsn = sql_dsn(state.database_url)
    while not ids <= await asyncio.to_thread(derived_ids, dsn, workspace):
        if time.monotonic() - started > args.timeout:
            break
        await asyncio.sleep(0.5)
    took = time.monotonic() - started
    derived = len(ids & derived_ids(dsn, workspace))
    return {
        "messages": len(ids),
        "derived": derived,
        "acked_in_s": round(acked_s, 1),
        "all_derived_in_s": round(took, 1),
        "derived_messages_per_s": round(derived / took, 1),
        "deriver_model_calls": deriver_calls(server) - calls_before,
        "load_average": os.getloadavg(),
    }


async def run(args, root: Path) -> dict:
    result = {
        "benchmark": "scaleout-derivation",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "machine": machine(),
        "load_average_before": os.getloadavg(),
    }
    root.mkdir(parents=True, exist_ok=True)
    pin_fresh_ports(root)
    extra: subprocess.Popen | None = None
    with ModelServer() as server:
        server.reply_with(model_reply(args.delay_ms / 1000))
        env = {
            "PEERLOG_LLM_BASE_URL": server.base_url,
            "PEERLOG_LLM_MODEL": "bench",
            "PEERLOG_DERIVER_TICK_S": "1",
            "PEERLOG_DERIVER_MAX_WAIT_S": str(args.max_wait_s),
        }
        try:
            state = up(root, progress=log, model_env=env)
            result["1 worker"] = await phase(state, args, server)
            log(f"1 worker: {result['1 worker']}")
            extra = subprocess.Popen(
                [sys.executable, "-m", "services.cli.main", *PROCESSES["worker"]],
                env={**os.environ, **state.env()},
                stdout=open(root / "worker2.log", "ab"),
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            await asyncio.sleep(args.join_s)  # the groups rebalance onto both workers
            result["2 workers"] = await phase(state, args, server)
            log(f"2 workers: {result['2 workers']}")
        finally:
            if extra is not None:
                extra.terminate()
                extra.wait(30)
            down(root, progress=log)
    result["config"] = {k: str(v) for k, v in vars(args).items()}
    result["load_average_after"] = os.getloadavg()
    return result


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1000)
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--delay-ms", type=int, default=200)
    p.add_argument("--max-wait-s", type=float, default=5)
    p.add_argument("--join-s", type=float, default=30)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--out", type=Path, default=ROOT / "tests/bench/results/scaleout.json")
    args = p.parse_args(argv)
    result = asyncio.run(run(args, Path(tempfile.mkdtemp(prefix="peerlog-scaleout-"))))
    text = json.dumps(result, indent=2, default=str)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
