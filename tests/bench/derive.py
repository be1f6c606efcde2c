#!/usr/bin/env python
"""Deriver benchmark: throughput, model calls per 1,000 messages, and freshness, on the local stack.

    .venv/bin/python tests/bench/derive.py [--messages 300] [--sessions 10] [--delay-ms 200] \
        [--out tests/bench/results/derive.json]
    .venv/bin/python tests/bench/derive.py --local-model [--messages 8]   # the real local model

The model is the deterministic OpenAI-compatible test server answering every call after a fixed
delay (one fact per target turn), or with --local-model the real Qwen 0.5B server. Two phases on one
stack: `flush` (every message derived at once; freshness = AddMessages ack → an observation citing
that message is readable in Postgres, polled every 10 ms) and `batched` (the default 512-token
batching; model calls per 1,000 messages). Prints one JSON object and writes it to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shlex
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from infra.stack import down, sql_dsn, up  # noqa: E402
from services.api.channels import aio_channel  # noqa: E402
from services.cli.client import Client  # noqa: E402
from tests.support.extractor import extract_each_turn, is_deriver  # noqa: E402
from tests.support.model_server import ModelServer, Reply  # noqa: E402

TOPICS = [
    "my garden",
    "a trip to Porto",
    "learning the cello",
    "my sister's wedding",
    "a new job in Oslo",
    "our old dog",
    "the book club",
    "running a marathon",
    "a broken laptop",
    "the farmers market",
]


def log(msg: str) -> None:
    print(f"[derive-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def turn(rng: random.Random, i: int) -> str:
    return f"Message {i}: I want to tell you about {rng.choice(TOPICS)}, it has been on my mind since {rng.randint(1, 28)} May."


async def drive(
    state, workspace: str, n: int, sessions: int, rng: random.Random, rate: float | None
) -> dict[str, float]:
    """Post n messages (one per call, round-robin over sessions, at `rate` per second or as fast as
    possible); return the ack time per message id."""
    acked: dict[str, float] = {}
    async with aio_channel(f"127.0.0.1:{state.api_port}", state.admin_token()) as channel:
        c = Client(channel)
        await c.workspace(workspace)
        peers = [f"p{s}" for s in range(sessions)]
        for p in peers:
            await c.peer(workspace, p)
        for s, p in enumerate(peers):
            await c.session(workspace, f"s{s}", members=[p])
        for i in range(n):
            s = i % sessions
            resp = await c.add(workspace, f"s{s}", [(peers[s], turn(rng, i))])
            acked[resp.message_ids[0]] = time.monotonic()
            if rate:
                await asyncio.sleep(1 / rate)
    return acked


OBSERVED = 'SELECT DISTINCT message_id FROM "{schema}".observation_sources WHERE workspace_id = %s'
# a real model may find nothing in a message: then "derived" means its batch finished
FINISHED = (
    'SELECT DISTINCT unnest(message_ids) FROM "{schema}".derivation_batches '
    "WHERE workspace_id = %s AND state IN ('done', 'dead_lettered')"
)


def watch(
    dsn: str, schema: str, workspace: str, expected: int, timeout: float, query: str = OBSERVED
) -> dict[str, float]:
    """First time each message was derived (polled every 10 ms while the messages are sent)."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline and len(seen) < expected:
            rows = conn.execute(query.format(schema=schema), (workspace,)).fetchall()
            now = time.monotonic()
            for (mid,) in rows:
                seen.setdefault(mid, now)
            time.sleep(0.01)
    return seen


async def phase(
    state,
    name: str,
    n: int,
    sessions: int,
    server: ModelServer | None,
    rate: float | None = None,
    query: str = OBSERVED,
) -> dict:
    workspace = f"bench-{name}"
    await warm_up(state, name)
    calls_before = len([r for r in server.chat_requests() if is_deriver(r)]) if server else 0
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    watching = loop.run_in_executor(None, watch, sql_dsn(state.database_url), "peerlog", workspace, n, 900, query)
    acked = await drive(state, workspace, n, sessions, random.Random(7), rate)
    ids = set(acked)
    seen = await watching
    elapsed = max(seen.values(), default=started) - started
    fresh = [(seen[m] - acked[m]) * 1000 for m in ids if m in seen]
    calls = (len([r for r in server.chat_requests() if is_deriver(r)]) - calls_before) if server else None
    return {
        "messages": n,
        "offered_rate_per_s": rate or "as fast as possible",
        "derived": len(seen),
        "messages_per_s": round(len(seen) / elapsed, 1) if elapsed else None,
        "llm_calls": calls,
        "llm_calls_per_1000_messages": round(calls * 1000 / n, 1) if calls is not None else None,
        "freshness_ms": {"p50": pct(fresh, 0.5), "p99": pct(fresh, 0.99), "max": pct(fresh, 1.0)},
    }


async def warm_up(state, name: str) -> None:
    """One message through the whole pipeline first, so group joins and model loading are not measured."""
    loop = asyncio.get_running_loop()
    workspace = f"warmup-{name}"
    watching = loop.run_in_executor(None, watch, sql_dsn(state.database_url), "peerlog", workspace, 1, 300, FINISHED)
    await drive(state, workspace, 1, 1, random.Random(1), None)
    await watching


def batch_seconds(dsn: str, workspace: str) -> list[float]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM finished_at - started_at) FROM peerlog.derivation_batches "
            "WHERE workspace_id = %s AND state = 'done' AND started_at IS NOT NULL",
            (workspace,),
        )
        return [float(r[0]) for r in rows]


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "")
    mem = next((line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemTotal")), "0")
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(int(mem) / 1024 / 1024, 1),
        "cpu": cpu,
        "python": platform.python_version(),
    }


async def run(args) -> dict:
    root = Path(tempfile.mkdtemp(prefix="peerlog-derive-bench-"))
    result = {
        "benchmark": "derive",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": " ".join(shlex.quote(a) for a in sys.argv),
    }
    if args.local_model:
        result.update(await run_local(root, args))
        return result
    with ModelServer() as server:
        server.reply_with(lambda req: Reply(content=extract_each_turn(req).content, delay_s=args.delay_ms / 1000))
        env = {"PEERLOG_LLM_BASE_URL": server.base_url, "PEERLOG_LLM_MODEL": "bench-model"}
        result["model"] = f"test server, {args.delay_ms} ms per call"
        phases = (
            # freshness under a load the deriver sustains; then throughput when flooded
            ("flush", {"PEERLOG_DERIVER_FLUSH": "true"}, args.rate),
            ("flush_flood", {"PEERLOG_DERIVER_FLUSH": "true"}, None),
            # default 512-token batching; the age limit is cut to 10 s so the tail of each pair is derived too
            ("batched", {"PEERLOG_DERIVER_TICK_S": "1", "PEERLOG_DERIVER_MAX_WAIT_S": "10"}, None),
        )
        for name, extra, rate in phases:
            log(f"phase {name}: starting the stack")
            state = up(root / name, progress=log, model_env={**env, **extra})
            try:
                result[name] = await phase(state, name, args.messages, args.sessions, server, rate)
                log(f"phase {name}: {result[name]}")
            finally:
                down(root / name, progress=log)
    return result


async def run_local(root: Path, args) -> dict:
    from infra.models.qwen import ensure_model
    from infra.models.server import LocalModelServer, ensure_llama_server

    ensure_llama_server()
    with LocalModelServer(ensure_model(), log_path=root / "model.log") as server:
        env = {
            "PEERLOG_LLM_BASE_URL": server.base_url,
            "PEERLOG_LLM_MODEL": server.model,
            "PEERLOG_LLM_SCHEMA_MODE": "json_object_schema",
            "PEERLOG_LLM_TIMEOUT_S": "180",
            "PEERLOG_DERIVER_FLUSH": "true",
        }
        state = up(root / "local", progress=log, model_env=env)
        try:
            out = await phase(state, "local", args.messages, 2, None, rate=0.2, query=FINISHED)
            secs = batch_seconds(sql_dsn(state.database_url), "bench-local")
        finally:
            down(root / "local", progress=log)
    return {
        "model": f"{server.model} (local llama-cpp-python server, 2 threads)",
        "local": out,
        "seconds_per_call": {
            "median": round(statistics.median(secs), 1) if secs else None,
            "max": round(max(secs), 1) if secs else None,
            "calls": len(secs),
        },
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--messages", type=int, default=300)
    p.add_argument("--sessions", type=int, default=10)
    p.add_argument("--delay-ms", type=int, default=200)
    p.add_argument("--rate", type=float, default=5.0, help="messages/s offered in the freshness phase")
    p.add_argument("--local-model", action="store_true")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if args.local_model and args.messages == 300:
        args.messages = 8
    out = args.out or ROOT / "tests/bench/results" / ("derive-local-model.json" if args.local_model else "derive.json")
    result = asyncio.run(run(args))
    text = json.dumps(result, indent=2)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
