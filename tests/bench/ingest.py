#!/usr/bin/env python
"""Ingest benchmark: durable AddMessages throughput, RPC latency and projection lag on the local stack.

    .venv/bin/python tests/bench/ingest.py [--dir D] [--keep] [--clients 8] [--procs 1] \
        [--seconds 30] [--warmup 5] [--rate 0] [--batch 100] [--sessions 24] \
        [--processes api,projector] [--env KEY=VALUE ...] [--wait-quiet S] [--raw FILE] [--keys] \
        [--out tests/bench/results/ingest.json]

Starts the dev stack (infra.stack.up) in a fresh temp dir or in --dir, creates a workspace, two peers
and --sessions sessions through the gRPC API, then N client tasks (spread over --procs processes, each
task with its own grpc.aio channel) send AddMessages batches back to back (or paced to --rate
messages/s in total) until the time is up. Stack processes off the ingest path (the worker) are
stopped unless --processes says otherwise.

Projection lag is measured without touching the API: a watcher process polls
`<schema>.projection_offsets` every --poll-ms and records when each partition's next_offset moved.
A write is projected once next_offset > offset for every part of its consistency token; its lag is
that moment (the poll that first saw it; an upper bound) minus the moment the client got the ack.

--keys sends every AddMessages with a fresh idempotency key (as the client library does), to compare the
cost of idempotent writes with a run without it.

Prints one JSON object on stdout (progress goes to stderr) and writes the same JSON to --out.
See tests/bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import multiprocessing as mp
import os
import platform
import queue
import random
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TARGET_RATE = 5000.0  # durable messages/s on a 2-core machine (the target)
TARGET_LAG_P99_MS = 1000.0
PEERS = ("alice", "bob")
WORDS = (
    "the a to of and in that is for it you with on this be are as have not was but we can they "
    "what about would just like so if will do there at my your from all one more when time out "
    "memory session agent context user assistant summary remember earlier conversation preference "
    "project deadline meeting tomorrow schedule report draft review budget travel flight hotel "
    "kafka postgres projection offset latency throughput batch producer consumer partition"
).split()


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- payloads


def sentence(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    n = 0
    while n < chars:
        w = rng.choice(WORDS)
        words.append(w)
        n += len(w) + 1
    text = " ".join(words)[:chars].rstrip()
    return text[0].upper() + text[1:] + "."


def contents(seed: int, count: int, mean_chars: int) -> list[str]:
    rng = random.Random(seed)
    return [sentence(rng, max(20, int(rng.gauss(mean_chars, mean_chars * 0.25)))) for _ in range(count)]


# --------------------------------------------------------------------------- watcher process


def watcher_main(dsn: str, schema: str, interval_s: float, control: mp.Queue, out: mp.Queue) -> None:
    """Poll projection_offsets; record (t, next_offset) each time a partition moves.

    Runs until it gets a target {(topic, partition): offset} on `control` and the projection has
    passed it, or until the deadline that comes with the target.
    """
    import psycopg
    from psycopg import sql

    timeline: dict[str, list[tuple[float, int]]] = {}
    last: dict[str, int] = {}
    poll_ms: list[float] = []
    query = sql.SQL("SELECT topic, partition, next_offset FROM {}.projection_offsets").format(sql.Identifier(schema))
    target: dict[str, int] | None = None
    deadline = float("inf")
    with psycopg.connect(dsn, autocommit=True) as conn:
        out.put(("ready", None))
        next_tick = time.monotonic()
        while True:
            t0 = time.monotonic()
            rows = conn.execute(query, prepare=True).fetchall()
            t = time.monotonic()  # the snapshot was taken before this: an upper bound on "projected"
            poll_ms.append((t - t0) * 1000)
            for topic, part, nxt in rows:
                tp = f"{topic}:{part}"
                if last.get(tp) != nxt:
                    last[tp] = nxt
                    timeline.setdefault(tp, []).append((t, nxt))
            if target is None:
                try:
                    msg = control.get_nowait()
                except queue.Empty:
                    msg = None
                if msg is not None:
                    target, deadline = msg
            if target is not None and (all(last.get(tp, 0) > off for tp, off in target.items()) or t > deadline):
                break
            next_tick += interval_s
            pause = next_tick - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:
                next_tick = time.monotonic()
    out.put(("done", {"timeline": timeline, "poll_ms": poll_ms}))


# --------------------------------------------------------------------------- client processes


def client_main(proc_idx: int, client_ids: list[int], cfg: dict, out: mp.Queue) -> None:
    try:
        out.put(("done", proc_idx, asyncio.run(_clients(client_ids, cfg))))
    except BaseException as exc:  # report, don't hang the parent
        out.put(("failed", proc_idx, repr(exc)))


async def _clients(client_ids: list[int], cfg: dict) -> dict:
    import grpc

    from peerlog.v1 import messages_pb2
    from services.api.channels import aio_channel
    from services.cli.client import Client

    texts = contents(1000 + client_ids[0], 2000, cfg["content_chars"])
    rng = random.Random(client_ids[0])
    sessions = cfg["sessions"]
    n_clients = cfg["clients"]
    batch = cfg["batch"]

    def request(session_id: str) -> messages_pb2.AddMessagesRequest:
        start = rng.randrange(len(texts))
        msgs = [
            messages_pb2.NewMessage(peer_id=PEERS[i % 2], content=texts[(start + i) % len(texts)]) for i in range(batch)
        ]
        return messages_pb2.AddMessagesRequest(workspace_id=cfg["workspace"], session_id=session_id, messages=msgs)

    calls: list[tuple[float, float, int, str]] = []  # (sent, acked, messages, token)
    errors: list[tuple[float, float, str, str]] = []
    start_at, stop_at = cfg["start_at"], cfg["stop_at"]
    per_client_cap = cfg["max_messages"] // n_clients
    # --rate: each client paces itself to rate/clients messages/s (open schedule, no catch-up bursts)
    interval = batch * n_clients / cfg["rate"] if cfg["rate"] > 0 else 0.0

    async def one_client(cid: int) -> None:
        mine = sessions[cid::n_clients] or [sessions[cid % len(sessions)]]
        pool = [request(mine[k % len(mine)]) for k in range(max(4, 2 * len(mine)))]
        sent = 0
        async with aio_channel(cfg["target"], cfg["token"]) as channel:
            stub = Client(channel).messages
            await channel.channel_ready()
            await asyncio.sleep(max(0.0, start_at - time.monotonic()))
            k = 0
            due = start_at + (cid / n_clients) * interval  # stagger the clients over one interval
            while time.monotonic() < stop_at and sent < per_client_cap:
                if interval:
                    if due >= stop_at:
                        break
                    pause = due - time.monotonic()
                    if pause > 0:
                        await asyncio.sleep(pause)
                    # behind schedule (slow acks): go on at once, but never burst to catch up
                    due = max(due + interval, time.monotonic())
                req = pool[k % len(pool)]
                k += 1
                if cfg["keys"]:  # the pool's requests are sent again and again: a new key for each send
                    req.idempotency_key = uuid.uuid4().hex
                t0 = time.monotonic()
                try:
                    resp = await stub.AddMessages(req, timeout=cfg["rpc_timeout"])
                except grpc.aio.AioRpcError as exc:
                    t1 = time.monotonic()
                    errors.append((t0, t1, exc.code().name, (exc.details() or "")[:200]))
                    await asyncio.sleep(0.05)  # don't spin on a failing server
                    continue
                t1 = time.monotonic()
                calls.append((t0, t1, len(req.messages), resp.consistency_token))
                sent += len(req.messages)

    await asyncio.gather(*(one_client(c) for c in client_ids))
    return {"calls": calls, "errors": errors}


# --------------------------------------------------------------------------- CPU accounting


CLK_TCK = os.sysconf("SC_CLK_TCK")


def _ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime (all threads)


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def _machine_ticks() -> tuple[int, int]:
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + parts[4]  # idle + iowait
    return sum(parts[:8]) - idle, sum(parts[:8])


class CpuMeter:
    """CPU seconds used per component between `start()` and `stop()`, as cores (seconds/second)."""

    def __init__(self, groups: dict[str, list[int]], with_children: set[str]) -> None:
        self.groups = groups
        self.with_children = with_children

    def _sample(self) -> dict[str, dict[int, int]]:
        snap: dict[str, dict[int, int]] = {}
        for name, pids in self.groups.items():
            all_pids = list(pids)
            if name in self.with_children:
                for p in pids:
                    all_pids += _children(p)
            snap[name] = {p: t for p in all_pids if (t := _ticks(p)) is not None}
        return snap

    def start(self) -> None:
        self.t0, self.s0, self.m0 = time.monotonic(), self._sample(), _machine_ticks()

    def stop(self) -> dict[str, float]:
        t1, s1, m1 = time.monotonic(), self._sample(), _machine_ticks()
        wall = t1 - self.t0
        cores = {
            name: round(sum(t - self.s0[name].get(p, 0) for p, t in s1[name].items()) / CLK_TCK / wall, 2)
            for name in self.groups
        }
        busy, total = m1[0] - self.m0[0], m1[1] - self.m0[1]
        machine_cores = (os.cpu_count() or 1) * busy / total if total else 0.0
        cores["other_processes"] = round(max(0.0, machine_cores - sum(cores.values())), 2)
        cores["machine_busy_pct"] = round(100.0 * busy / total, 1) if total else 0.0
        return cores


def idle_check(seconds: float = 2.0) -> float:
    """Machine busy % over a short quiet period (before the load: anything here is someone else)."""
    b0, t0 = _machine_ticks()
    time.sleep(seconds)
    b1, t1 = _machine_ticks()
    return round(100.0 * (b1 - b0) / (t1 - t0), 1) if t1 > t0 else 0.0


# --------------------------------------------------------------------------- statistics


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile."""
    if not values:
        return None
    s = sorted(values)
    rank = max(1, min(len(s), int(-(-q * len(s) // 100))))  # ceil(q/100 * n)
    return round(s[rank - 1], 1)


def summary(values: list[float]) -> dict:
    return {
        "p50": pct(values, 50),
        "p90": pct(values, 90),
        "p99": pct(values, 99),
        "max": round(max(values), 1) if values else None,
        "mean": round(sum(values) / len(values), 1) if values else None,
        "samples": len(values),
    }


def parse_token(token: str) -> dict[str, int]:
    from services.bus.consistency import ConsistencyToken

    return {f"{t}:{p}": o for (t, p), o in ConsistencyToken.decode(token).offsets.items()}


def projected_at(timeline: dict[str, list[tuple[float, int]]], parts: dict[str, int]) -> float | None:
    """First watcher time at which next_offset > offset for every part (None: never seen)."""
    worst = 0.0
    for tp, off in parts.items():
        series = timeline.get(tp)
        if not series:
            return None
        i = bisect.bisect_right([n for _, n in series], off)
        if i == len(series):
            return None
        worst = max(worst, series[i][0])
    return worst


# --------------------------------------------------------------------------- machine / setup


def machine() -> dict:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kb = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:")
    )
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "cpu_model": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


async def setup_workspace(target: str, token: str, workspace: str, sessions: list[str]) -> None:
    from services.api.channels import aio_channel
    from services.cli.client import Client

    async with aio_channel(target, token) as channel:
        client = Client(channel)
        await client.workspace(workspace)
        for p in PEERS:
            await client.peer(workspace, p)
        for s in sessions:
            await client.session(workspace, s, members=PEERS)


def broker_pid(root: Path) -> int | None:
    """The JVM serving root/kafka, found by its command line (broker.pid can be stale, see below)."""
    config = str(root / "kafka" / "server.properties").encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"kafka.Kafka" in args and config in args:
                return int(entry.name)
    return None


def postmaster_pid(root: Path) -> int | None:
    from infra.processes import read_pid_file

    pid = read_pid_file(root / "postgres" / "pgdata" / "postmaster.pid")
    return pid if pid is not None and _ticks(pid) is not None else None


def running_stack(root: Path, needed: list[str]):
    """The stack's state if Kafka, Postgres and the `needed` processes already run, else None.

    stack.up() on a running stack launches a second broker JVM (which rewrites server.properties
    with a new controller port and broker.pid with its own pid, then exits), leaving the first
    broker unreachable for `down` and failing its controller heartbeats; so a running stack is
    reused as it is.
    """
    from infra import stack
    from infra.processes import pid_alive

    if not (root / "stack.json").exists():
        return None
    state = stack.load_state(root)
    if broker_pid(root) is None or postmaster_pid(root) is None:
        return None
    if not all(pid_alive(state.pids.get(name, 0)) for name in needed):
        return None
    return state


def pin_fresh_ports(root: Path) -> None:
    """Give a new stack kernel-picked ports instead of the dev defaults (9092, 54329, 50051).

    Other stacks on the machine prefer those defaults, and gRPC servers bind with SO_REUSEPORT:
    two APIs on one port silently share its connections, so half the load would reach a stranger.
    """
    from infra import stack
    from infra.processes import free_port

    ports: list[int] = []
    for _ in range(3):
        ports.append(free_port(avoid=set(ports)))
    state = stack.StackState(root=str(root), kafka_port=ports[0], postgres_port=ports[1], api_port=ports[2])
    stack._save(state)


def stop_others(state, keep: list[str]) -> list[str]:
    """SIGTERM the stack processes not in `keep` (the next `up` starts them again)."""
    from infra.processes import pid_alive, terminate

    stopped = []
    for name, pid in state.pids.items():
        if name not in keep and pid_alive(pid):
            terminate(pid, 30)
            stopped.append(name)
    return stopped


def stack_pids(root: Path, state) -> dict[str, list[int]]:
    pids: dict[str, list[int]] = {}
    if (pid := broker_pid(root)) is not None:
        pids["kafka"] = [pid]
    if (pid := postmaster_pid(root)) is not None:
        pids["postgres"] = [pid]
    from infra.processes import pid_alive

    for name, pid in state.pids.items():
        if pid_alive(pid):
            pids[name] = [pid]
    return pids


def count_projected(dsn: str, schema: str, workspace: str) -> int:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn) as conn:
        return conn.execute(
            sql.SQL("SELECT count(*) FROM {}.messages WHERE workspace_id = %s").format(sql.Identifier(schema)),
            (workspace,),
        ).fetchone()[0]


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, help="stack directory to use (default: a fresh temp dir)")
    ap.add_argument("--keep", action="store_true", help="leave the stack running (and the temp dir)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients (asyncio tasks)")
    ap.add_argument("--procs", type=int, default=1, help="client processes the clients are spread over")
    ap.add_argument("--seconds", type=float, default=30.0, help="measured load duration")
    ap.add_argument("--warmup", type=float, default=5.0, help="load before the measured window")
    ap.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="offered load in messages/s over all clients (0: as fast as acks come back)",
    )
    ap.add_argument("--batch", type=int, default=100, help="messages per AddMessages call (API max 100)")
    ap.add_argument("--sessions", type=int, default=24, help="sessions the clients write to")
    ap.add_argument("--content-chars", type=int, default=150, help="mean message length")
    ap.add_argument("--max-messages", type=int, default=5_000_000, help="hard cap on messages sent")
    ap.add_argument("--rpc-timeout", type=float, default=30.0, help="per-call deadline (s)")
    ap.add_argument("--poll-ms", type=float, default=5.0, help="watcher poll interval")
    ap.add_argument(
        "--drain-timeout",
        type=float,
        default=120.0,
        help="how long to wait for the projection to catch up after the load",
    )
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="PEERLOG_* setting for the stack processes (only those this run starts)",
    )
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for the machine to be idle (<15%% busy) before the load",
    )
    ap.add_argument(
        "--processes",
        default="api,projector",
        help="stack processes to keep running (comma list; 'all' keeps every one)",
    )
    ap.add_argument("--keys", action="store_true", help="a fresh idempotency key on every AddMessages")
    ap.add_argument("--raw", type=Path, help="also write every call (send time, latency, lag) here")
    ap.add_argument("--out", type=Path, default=ROOT / "tests/bench/results/ingest.json")
    args = ap.parse_args(argv)
    if not 1 <= args.batch <= 100:
        ap.error("--batch must be 1..100 (the API's per-call limit)")
    args.procs = max(1, min(args.procs, args.clients))
    from infra.stack import PROCESSES

    args.processes = list(PROCESSES) if args.processes == "all" else args.processes.split(",")
    for needed in ("api", "projector"):
        if needed not in args.processes:
            ap.error(f"--processes must include {needed}")
    return args


def apply_env(args: argparse.Namespace) -> None:
    """Put each --env PEERLOG_KEY=VALUE into this process's environment (the stack inherits it)."""
    for kv in args.env:
        key, sep, value = kv.partition("=")
        if not sep or not key.startswith("PEERLOG_"):
            raise SystemExit(f"--env wants PEERLOG_KEY=VALUE, got {kv!r}")
        os.environ[key] = value


def start_stack(root: Path, args: argparse.Namespace, made_dir: bool):
    """The running stack in root reused as it is, or a new one; then only the processes of the ingest path."""
    from infra import stack

    state = running_stack(root, args.processes)
    if state is None:
        if made_dir:
            pin_fresh_ports(root)
        state = stack.up(root, progress=lambda s: log(s))
    else:
        if args.env:
            log("warning: the stack already runs; --env does not reach its processes")
        stack.wait_for_api(state.api_port)
        log(f"reusing the running stack in {root}")
    stopped = stop_others(state, args.processes)
    if stopped:
        log(f"stopped {', '.join(stopped)} (not part of the ingest path; see --processes)")
    return state


def wait_for_quiet(args: argparse.Namespace) -> float:
    """Wait up to --wait-quiet for the machine to be at most 15% busy; return how busy it was last."""
    busy_before = idle_check()
    waited = 0.0
    while busy_before > 15 and waited < args.wait_quiet:
        log(f"machine {busy_before}% busy (other work); waiting for it to quiet down")
        time.sleep(5)
        waited += 7
        busy_before = idle_check()
    if busy_before > 15:
        log(f"warning: the machine is {busy_before}% busy before the load; figures will be low")
    return busy_before


def start_watcher(ctx, dsn: str, schema: str, args: argparse.Namespace):
    """The projection watcher process, started and ready; returns it with its control and output queues."""
    w_control, w_out = ctx.Queue(), ctx.Queue()
    watcher = ctx.Process(target=watcher_main, args=(dsn, schema, args.poll_ms / 1000, w_control, w_out), daemon=True)
    watcher.start()
    if w_out.get(timeout=60)[0] != "ready":
        raise RuntimeError("watcher did not start")
    return watcher, w_control, w_out


def start_clients(ctx, args: argparse.Namespace, cfg: dict):
    """The client processes, the clients dealt round-robin among them; returns them and their output queue."""
    c_out = ctx.Queue()
    procs = []
    for i in range(args.procs):
        ids = list(range(i, args.clients, args.procs))
        p = ctx.Process(target=client_main, args=(i, ids, cfg, c_out), daemon=True)
        p.start()
        procs.append(p)
    return procs, c_out


def collect_calls(procs, c_out, hard_deadline: float):
    """Every client process's acknowledged calls and errors (raises if one failed)."""
    calls: list[tuple[float, float, int, str]] = []
    errors: list[tuple[float, float, str, str]] = []
    for _ in procs:
        kind, idx, payload = c_out.get(timeout=max(1.0, hard_deadline - time.monotonic()))
        if kind != "done":
            raise RuntimeError(f"client process {idx} failed: {payload}")
        calls += payload["calls"]
        errors += payload["errors"]
    for p in procs:
        p.join(10)
    log(f"load done: {len(calls)} calls acknowledged, {len(errors)} failed; waiting for the projection")
    if errors:
        log(f"first error: {errors[0][2]} {errors[0][3]}")
    if not calls:
        raise RuntimeError("no AddMessages call succeeded; see the first error above")
    return calls, errors


def run_load(
    ctx, args: argparse.Namespace, root: Path, state, target: str, workspace: str, sessions: list[str], watcher
):
    """Warm up, then measure for --seconds; returns calls, errors, CPU use and the measured window."""
    start_at = time.monotonic() + 3.0 + 0.5 * args.procs  # time for the client processes to boot
    measure_at = start_at + args.warmup
    stop_at = measure_at + args.seconds
    cfg = dict(
        target=target,
        token=state.admin_token(),
        workspace=workspace,
        sessions=sessions,
        clients=args.clients,
        batch=args.batch,
        content_chars=args.content_chars,
        start_at=start_at,
        stop_at=stop_at,
        max_messages=args.max_messages,
        rpc_timeout=args.rpc_timeout,
        rate=args.rate,
        keys=args.keys,
    )
    procs, c_out = start_clients(ctx, args, cfg)

    groups = stack_pids(root, state)
    groups["bench_clients"] = [p.pid for p in procs]
    groups["bench_watcher"] = [watcher.pid]
    meter = CpuMeter(groups, with_children={"postgres", "api"})  # api: with PEERLOG_API_PROCESSES > 1
    log(
        f"load: {args.clients} clients in {args.procs} process(es), batch {args.batch}, "
        f"warmup {args.warmup:g} s, measure {args.seconds:g} s"
    )
    time.sleep(max(0.0, measure_at - time.monotonic()))
    meter.start()
    time.sleep(max(0.0, stop_at - time.monotonic()))
    cpu = meter.stop()
    calls, errors = collect_calls(procs, c_out, stop_at + args.rpc_timeout + 30)
    return calls, errors, cpu, measure_at, stop_at


def drain(watcher, w_control, w_out, calls, args: argparse.Namespace):
    """Tell the watcher the highest acknowledged offset per partition and wait until it is projected.

    Returns each call's parsed token, what the watcher saw, and how long the drain took.
    """
    tokens = [parse_token(tok) for _, _, _, tok in calls]
    final: dict[str, int] = {}
    for parts in tokens:
        for tp, off in parts.items():
            final[tp] = max(off, final.get(tp, -1))
    drain_started = time.monotonic()
    w_control.put((final, time.monotonic() + args.drain_timeout))
    kind, watched = w_out.get(timeout=args.drain_timeout + 30)
    watcher.join(10)
    return tokens, watched, time.monotonic() - drain_started


def measure(calls, tokens, timeline, measure_at: float, stop_at: float, raw_path: Path | None):
    """The calls sent in the measured window, their RPC latencies, projection lags from the answer and from the
    sending (raw rows to raw_path)."""
    in_window = [(c, parts) for c, parts in zip(calls, tokens) if measure_at <= c[1] <= stop_at]
    latency = [(c[1] - c[0]) * 1000 for c, _ in in_window]
    lags, since_sent, unprojected, raw = [], [], 0, []
    for c, parts in in_window:
        seen = projected_at(timeline, parts)
        if seen is None:
            unprojected += 1
        else:
            lags.append(max(0.0, seen - c[1]) * 1000)
            since_sent.append(max(0.0, seen - c[0]) * 1000)
        raw.append(
            [
                round(c[0] - measure_at, 4),
                round((c[1] - c[0]) * 1000, 2),
                None if seen is None else round(max(0.0, seen - c[1]) * 1000, 2),
                c[2],
                parts,
            ]
        )
    if raw_path:
        raw_path.write_text(json.dumps({"columns": ["sent_s", "rpc_ms", "lag_ms", "messages", "token"], "calls": raw}))
    return in_window, latency, lags, since_sent, unprojected


def config_of(args: argparse.Namespace, settings, state, partitions: int, made_dir: bool) -> dict:
    """The report's "config": what was offered, and the settings the stack ran with."""
    from infra.processes import pid_alive

    return {
        "clients": args.clients,
        "procs": args.procs,
        "batch": args.batch,
        "offered_rate": args.rate or "unthrottled",
        "seconds": args.seconds,
        "warmup_s": args.warmup,
        "sessions": args.sessions,
        "partitions": partitions,
        "content_chars_mean": args.content_chars,
        "poll_ms": args.poll_ms,
        "idempotency_keys": args.keys,
        "producer_pool_size": settings.kafka.producer_pool_size,
        "projector_max_batch": settings.projector.max_batch,
        "env": {
            k: v
            for k, v in os.environ.items()
            if k.startswith("PEERLOG_")
            and not any(w in k for w in ("URL", "BOOTSTRAP", "KEY", "TOKEN", "SECRET", "PASSWORD"))
        },
        "stack_dir_reused": not made_dir,
        "stack_processes": sorted(n for n in state.pids if pid_alive(state.pids[n])),
    }


def write_report(
    args: argparse.Namespace, argv: list[str], config: dict, results: dict, rate: float, lag: dict, unprojected: int
) -> None:
    """Print the report and write it to --out."""
    report = {
        "benchmark": "ingest",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([".venv/bin/python", os.path.relpath(__file__, ROOT), *argv]),
        "config": config,
        "machine": machine(),
        "load_average_after": os.getloadavg(),  # 1/5/15 min: the machine is shared
        "results": results,
        "targets": {
            "durable_messages_per_s": TARGET_RATE,
            "projection_lag_p99_ms": TARGET_LAG_P99_MS,
            "met": bool(
                rate >= TARGET_RATE and lag["p99"] is not None and lag["p99"] < TARGET_LAG_P99_MS and unprojected == 0
            ),
        },
    }
    text = json.dumps(report, indent=2)
    print(text, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    log(f"wrote {args.out}")


def bench(args: argparse.Namespace, argv: list[str], root: Path, made_dir: bool, state) -> None:
    """Set up a workspace, load it, wait for the projection and write the report."""
    from infra.stack import sql_dsn
    from services.bus.admin import partitions_of
    from services.bus.settings import KafkaSettings
    from services.settings import Settings

    settings = Settings()  # what the stack processes see (same environment)
    schema = settings.database.schema_name
    dsn = sql_dsn(state.database_url)
    target = f"127.0.0.1:{state.api_port}"
    kafka = KafkaSettings(bootstrap_servers=state.bootstrap_servers)
    partitions = len(partitions_of(kafka, f"{kafka.topic_prefix}sessions"))

    workspace = f"bench-{datetime.now(UTC):%Y%m%d%H%M%S}-{uuid.uuid4().hex[:6]}"
    sessions = [f"s{i:03d}" for i in range(args.sessions)]
    log(f"setting up workspace {workspace}: {len(PEERS)} peers, {len(sessions)} sessions")
    asyncio.run(setup_workspace(target, state.admin_token(), workspace, sessions))
    busy_before = wait_for_quiet(args)

    ctx = mp.get_context("spawn")
    # the watcher first, so it sees the offsets before the load begins
    watcher, w_control, w_out = start_watcher(ctx, dsn, schema, args)
    calls, errors, cpu, measure_at, stop_at = run_load(ctx, args, root, state, target, workspace, sessions, watcher)
    tokens, watched, drained_s = drain(watcher, w_control, w_out, calls, args)
    in_window, latency, lags, since_sent, unprojected = measure(
        calls, tokens, watched["timeline"], measure_at, stop_at, args.raw
    )
    projected_rows = count_projected(dsn, schema, workspace)

    acked_msgs = sum(c[2] for c, _ in in_window)
    rate = acked_msgs / args.seconds
    lag = summary(lags)
    results = {
        "durable_messages_per_s": round(rate, 1),
        "acked_messages": acked_msgs,
        "acked_calls": len(in_window),
        "failed_calls": len([e for e in errors if measure_at <= e[1] <= stop_at]),
        "error_codes": dict(Counter(e[2] for e in errors)),
        "rpc_latency_ms": summary(latency),
        "projection_lag_ms": {**lag, "unprojected": unprojected},
        # from the call's sending, not its answer: what the lag would be had the write been answered at once
        # (AddMessages answers only once the projector is close behind: services/api/backpressure.py)
        "sent_to_projected_ms": summary(since_sent),
        "drain_s": round(drained_s, 2),
        "projected_rows_vs_acked": [projected_rows, sum(c[2] for c in calls)],
        "watcher_poll_ms": summary(watched["poll_ms"]),
        "cpu_cores": cpu,
        "machine_busy_pct_before_load": busy_before,
    }
    if errors:
        results["first_error"] = errors[0][3]
    config = config_of(args, settings, state, partitions, made_dir)
    write_report(args, argv, config, results, rate, lag, unprojected)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    apply_env(args)

    from infra import stack
    from infra.processes import log_tail

    made_dir = args.dir is None
    root = Path(tempfile.mkdtemp(prefix="peerlog-bench-")) if made_dir else args.dir.resolve()
    log(f"stack dir {root}")
    state = None
    ok = False
    try:
        state = start_stack(root, args, made_dir)
        bench(args, argv, root, made_dir, state)
        ok = True
        return 0
    except BaseException:
        for name in ("api", "projector"):
            path = root / f"{name}.log"
            if path.exists():
                log(f"last lines of {path}:\n" + log_tail(path, 15))
        raise
    finally:
        if args.keep:
            log(f"stack left running in {root} (stop: peerlog dev down --dir {root})")
        elif state is not None or (root / "stack.json").exists():
            stack.down(root, progress=lambda s: log(s))
            if made_dir and ok:
                shutil.rmtree(root, ignore_errors=True)
            elif made_dir:
                log(f"kept {root} for its logs")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
