#!/usr/bin/env python
"""One broker of three SIGKILLed in the middle of an ingest and derivation load, restarted later.

    .venv/bin/python tests/bench/cluster.py [--rate 100] [--before 30] [--during 40] [--after 30]

A KRaft cluster of three nodes (infra.kafka.KafkaCluster: replication factor 3, min.insync.replicas=2),
embedded Postgres, and one projector, worker and API process, every topic created with three replicas.
The deterministic test model answers after --delay-ms. Clients offer --rate messages/s (each call under
an idempotency key, retried until acknowledged). After --before seconds one node is SIGKILLed; it is
restarted --during seconds later; the load goes on --after seconds more. Then the pipeline drains and
every acknowledged message is looked for on the log and in Postgres, and its derivation counted.
Reports throughput and AddMessages latency before, during and after, and derivation throughput.
Prints one JSON object and writes it to --out (default tests/bench/results/cluster.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from collections import Counter  # noqa: E402

from infra.kafka.cluster import KafkaCluster  # noqa: E402
from infra.postgres.embedded import EmbeddedPostgres  # noqa: E402
from infra.stack import PROCESSES, StackState, sql_dsn, wait_for_api  # noqa: E402
from services.bus.admin import create_topics  # noqa: E402
from services.bus.settings import KafkaSettings  # noqa: E402
from services.bus.topics import SESSIONS  # noqa: E402
from services.events import MessageAppended  # noqa: E402
from tests.bench.chaos import (  # noqa: E402
    Load,
    derived_ids,
    log,
    model_reply,
    pct,
    query,
    read_topic,
    seed_pairs,
    wait_quiet,
)
from tests.bench.ingest import machine, pin_fresh_ports  # noqa: E402
from tests.support.model_server import ModelServer  # noqa: E402


class DerivedMeter(threading.Thread):
    """Counts derived messages every second: (monotonic time, count)."""

    def __init__(self, dsn: str, workspace: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.workspace = dsn, workspace
        self.samples: list[tuple[float, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(1.0):
            self.samples.append((time.monotonic(), len(derived_ids(self.dsn, self.workspace))))

    def rate(self, start: float, end: float) -> float | None:
        inside = [(t, n) for t, n in self.samples if start <= t <= end]
        if len(inside) < 2 or inside[-1][0] == inside[0][0]:
            return None
        return round((inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]), 1)


def spawn(root: Path, name: str, env: dict[str, str]) -> subprocess.Popen:
    out = open(root / f"{name}.log", "ab")
    return subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", *PROCESSES[name]],
        env={**os.environ, **env},
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def phase_figures(load: Load, meter: DerivedMeter, start: float, end: float) -> dict:
    lat = [s * 1000 for t, s in load.latencies if start <= t < end]
    acked = sum(1 for t, _ in load.latencies if start <= t < end)
    return {
        "seconds": round(end - start, 1),
        "calls_acked": acked,
        "messages_acked_per_s": round(acked * load.batch / (end - start), 1),
        "add_latency_ms": {"p50": pct(lat, 0.5), "p99": pct(lat, 0.99), "max": pct(lat, 1.0)},
        "derived_messages_per_s": meter.rate(start, end),
    }


async def drive(args, state: StackState, cluster: KafkaCluster, dsn: str) -> dict:
    workspace, sessions = await seed_pairs(state, "cluster", args.sessions)
    load = Load(state, workspace, sessions, args.rate, args.batch)
    meter = DerivedMeter(dsn, workspace)
    meter.start()
    t0 = time.monotonic()
    running = asyncio.create_task(load.run(10**9))
    victim = cluster.nodes[args.victim - 1]
    await asyncio.sleep(args.warmup + args.before)
    killed_at = time.monotonic()
    log(f"SIGKILL node {args.victim} (pid {victim.pid})")
    victim.kill()
    await asyncio.sleep(args.during)
    restart_at = time.monotonic()
    log(f"restarting node {args.victim}")
    await asyncio.to_thread(victim.start, 300)
    back_at = time.monotonic()
    log(f"node {args.victim} back after {back_at - restart_at:.1f} s")
    load.stop_at = back_at + args.after  # the "after" phase counts from the node's return
    await running
    end = time.monotonic()
    log(f"load done: {len(load.acked)} acknowledged; draining")
    drain = await asyncio.to_thread(wait_quiet, dsn, workspace, set(load.acked.values()), args.drain_timeout)
    meter.stopping.set()
    on_log = Counter(
        e.content
        for e in read_topic(cluster.bootstrap_servers, SESSIONS.full_name("peerlog."))
        if isinstance(e, MessageAppended) and e.workspace_id == workspace
    )
    projected = Counter(
        dict(
            query(
                dsn,
                "SELECT content, count(*) FROM peerlog.messages WHERE workspace_id = %s GROUP BY content",
                (workspace,),
            )
        )
    )
    derived = derived_ids(dsn, workspace)
    return {
        "acknowledged": len(load.acked),
        "lost": sum(on_log[m] == 0 for m in load.acked),
        "lost_in_projection": sum(projected[m] == 0 for m in load.acked),
        "duplicated": sum(n > 1 for n in projected.values()),
        # a retried call's first try appended after all: a second copy under its idempotency key, skipped downstream
        "repeated_appends_on_log": sum(n > 1 for n in on_log.values()),
        "not_derived": sum(m not in derived for m in load.acked.values()),
        "rpc_errors_retried": dict(load.errors),
        "calls_given_up": load.gave_up,
        "drain_seconds": round(drain, 1),
        "victim_restart_s": round(back_at - restart_at, 1),
        "before": phase_figures(load, meter, t0 + args.warmup, killed_at),
        "during": phase_figures(load, meter, killed_at, restart_at),
        "after": phase_figures(load, meter, back_at, end),
    }


async def run(args, root: Path) -> dict:
    result = {
        "benchmark": "cluster",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "machine": machine(),
        "load_average_before": os.getloadavg(),
    }
    root.mkdir(parents=True, exist_ok=True)
    pin_fresh_ports(root)
    ports = json.loads((root / "stack.json").read_text())
    cluster = KafkaCluster(
        root / "kafka",
        nodes=3,
        min_insync=2,
        properties={"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "1000"},
    )
    pg = EmbeddedPostgres(root / "postgres", port=ports["postgres_port"])
    procs: list[subprocess.Popen] = []
    with ModelServer() as server:
        server.reply_with(model_reply(args.delay_ms / 1000))
        try:
            log("starting three brokers")
            cluster.start()
            pg.start()
            state = StackState(
                root=str(root), api_port=ports["api_port"], database_url=pg.url, auth_secret=secrets.token_hex(32)
            )
            kafka = {
                "PEERLOG_KAFKA_BOOTSTRAP_SERVERS": cluster.bootstrap_servers,
                "PEERLOG_KAFKA_REPLICATION_FACTOR": "3",
            }
            create_topics(KafkaSettings(bootstrap_servers=cluster.bootstrap_servers, replication_factor=3))
            env = {
                **state.env(),
                **kafka,
                "PEERLOG_LLM_BASE_URL": server.base_url,
                "PEERLOG_LLM_MODEL": "bench",
                "PEERLOG_DERIVER_TICK_S": "1",
                "PEERLOG_DERIVER_MAX_WAIT_S": "10",
            }
            procs = [spawn(root, name, env) for name in PROCESSES]
            wait_for_api(state.api_port, 180)
            figures = await drive(args, state, cluster, sql_dsn(pg.url))
            crashed = [p.args[3] for p in procs if p.poll() is not None]
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
            cluster.stop()
            pg.stop()
    result.update(
        {
            "config": {k: str(v) for k, v in vars(args).items()},
            "topology": "3 KRaft nodes (broker+controller), replication factor 3, min.insync.replicas=2, "
            "1 API, 1 worker, 1 projector",
            **figures,
            "processes_exited": crashed,
            "load_average_after": os.getloadavg(),
        }
    )
    return result


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=100, help="messages/s offered")
    p.add_argument("--batch", type=int, default=5, help="messages per AddMessages call")
    p.add_argument("--sessions", type=int, default=10)
    p.add_argument("--delay-ms", type=int, default=200)
    p.add_argument("--warmup", type=float, default=10)
    p.add_argument("--before", type=float, default=30)
    p.add_argument("--during", type=float, default=40)
    p.add_argument("--after", type=float, default=30)
    p.add_argument("--victim", type=int, default=2, choices=[1, 2, 3])
    p.add_argument("--drain-timeout", type=float, default=600)
    p.add_argument("--dir", type=Path)
    p.add_argument("--out", type=Path, default=ROOT / "tests/bench/results/cluster.json")
    args = p.parse_args(argv)
    root = (args.dir or Path(tempfile.mkdtemp(prefix="peerlog-cluster-"))).resolve()
    result = asyncio.run(run(args, root))
    result["passed"] = result["lost"] == 0 and result["lost_in_projection"] == 0 and result["duplicated"] == 0
    text = json.dumps(result, indent=2, default=str)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
