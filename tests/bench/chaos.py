#!/usr/bin/env python
"""Chaos under load: many SIGKILLs, broker and Postgres restarts while messages are offered; then proof.

    .venv/bin/python tests/bench/chaos.py [--messages 50000] [--sessions 20] [--peers 40] \
        [--kills 20] [--broker-restarts 2] [--postgres-restarts 1] [--delay-ms 200] [--rate 200]

One local stack (infra.stack: Kafka, Postgres, projector, worker, API) with the deterministic test model
answering every call after --delay-ms. Clients offer --messages across the sessions (two peers each),
every call carrying an idempotency key and retried with it until acknowledged. Meanwhile, at random
moments, faults are injected: SIGKILL of a random stack process (api, worker, projector), the broker
restarted (the first cleanly, the second by SIGKILL) and Postgres restarted (the first by a fast shutdown,
the next by an immediate one: a crash, recovered from the WAL at start). A supervisor thread
restarts any stack process that is gone, as systemd would (0.5 s later). After each fault a probe
message measures the time until it is acknowledged, projected and derived again. With --rebuilds N, an
operator's `peerlog projections rebuild` runs N times during the load as its own process, about half of
them SIGKILLed a random moment in; the others must switch reads to a schema identical to the live one.

Afterwards, with the load drained: every acknowledged message is on the log and in the projection
exactly once, carrying its author's display name (every other peer has one); every message is
covered by exactly one BatchDerived; no observation is added twice; a rebuild of the projections equals
the live ones; nothing stays pending or dead-lettered. Prints one JSON object and writes it to --out
(default tests/bench/results/chaos.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
# before grpc is imported: its fork handlers once crashed this bench's `pg_ctl start` between fork and exec
# while the load's channels were busy (grpcio 1.81+, grpc issue 43055); no child here uses gRPC
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc  # noqa: E402
import psycopg  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from google.protobuf.struct_pb2 import Struct, Value  # noqa: E402

from infra.kafka.broker import KafkaBroker, running_broker, stop_broker  # noqa: E402
from infra.postgres.embedded import EmbeddedPostgres  # noqa: E402
from infra.processes import pid_alive  # noqa: E402
from infra.stack import _save, _spawn, down, sql_dsn, up  # noqa: E402
from peerlog.v1 import messages_pb2  # noqa: E402
from services.api.channels import aio_channel  # noqa: E402
from services.bus.topics import OBSERVATIONS, SESSIONS  # noqa: E402
from services.cli.client import Client  # noqa: E402
from services.events import BatchDerived, MessageAppended, ObservationAdded, decode  # noqa: E402
from tests.bench.ingest import machine, parse_token, pin_fresh_ports, projected_at  # noqa: E402
from tests.bench.rebuild import rebuild_process  # noqa: E402
from tests.support.extractor import extract_each_turn, is_deriver  # noqa: E402
from tests.support.model_server import ModelServer, Reply  # noqa: E402

KILLABLE = ("api", "worker", "projector")
# watched for crashes and restarted like the others, but never killed on purpose
WATCHED = (*KILLABLE, "webhooks")


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else None


# --------------------------------------------------------------------------- the supervisor


class Supervisor(threading.Thread):
    """Restarts every stack process that is gone, 0.5 s after it went (as systemd's RestartSec would)."""

    def __init__(self, state) -> None:
        super().__init__(daemon=True)
        self.state = state
        self.killed: set[int] = set()  # pids the chaos killed; any other death is a crash to report
        self.crashes: list[dict] = []
        self.restarts = Counter()
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            with self.lock:
                for name in WATCHED:
                    pid = self.state.pids.get(name, 0)
                    if pid_alive(pid):
                        continue
                    if pid not in self.killed:
                        self.crashes.append({"process": name, "pid": pid, "at": time.time()})
                        log(f"{name} (pid {pid}) exited without being killed; restarting it")
                    self.state.pids[name] = _spawn(self.state, name)
                    _save(self.state)  # down() stops the pids stack.json names
                    self.restarts[name] += 1

    def kill(self, name: str) -> int:
        with self.lock:
            pid = self.state.pids[name]
            self.killed.add(pid)
            os.kill(pid, signal.SIGKILL)
            return pid

    def stop(self) -> None:
        self.stopping.set()
        self.join()


class Rebuilds:
    """Operators' rebuilds during the load, each its own `peerlog projections rebuild` process under the
    same faults: about half are SIGKILLed a random moment in (the next one carries their build on), the
    others run to the end and switch reads while the load goes on."""

    def __init__(self, state, count: int, gap: tuple[float, float], seed: int) -> None:
        self.state, self.count, self.gap = state, count, gap
        self.rng = random.Random(seed + 1)
        self.runs: list[dict] = []

    async def run(self) -> None:
        for _ in range(self.count):
            await asyncio.sleep(self.rng.uniform(*self.gap))
            kill_after = round(self.rng.uniform(2, 8), 1) if self.rng.random() < 0.5 else None  # most take longer
            outcome = await asyncio.to_thread(self.one, kill_after)
            self.runs.append(outcome)
            log(f"rebuild {len(self.runs)}/{self.count}: {outcome}")

    def one(self, kill_after: float | None) -> dict:
        status, said, seconds = rebuild_process(self.state.env(), kill_after or 3600)
        verified = [line for line in said if line.startswith(("verified:", "differences from"))]
        return {
            "killed_after_s": kill_after if status == -signal.SIGKILL else None,
            "exit": status,
            "seconds": round(seconds, 1),
            "resumed": any(line.startswith("resuming ") for line in said),
            "switched": any(line.startswith("reads now served") for line in said),
            "verified": verified[-1] if verified else None,
            "last_line": said[-1] if said else "",
        }

    @property
    def failed(self) -> list[dict]:
        """Rebuilds that ended on their own without switching to an identical schema."""
        return [r for r in self.runs if r["killed_after_s"] is None and not (r["exit"] == 0 and r["switched"])]


# --------------------------------------------------------------------------- the load


class Load:
    """Clients offering messages; every call retried under its idempotency key until acknowledged."""

    def __init__(
        self, state, workspace: str, sessions: list[tuple[str, tuple[str, str]]], rate: float, batch: int
    ) -> None:
        self.state, self.workspace, self.sessions = state, workspace, sessions
        self.rate, self.batch = rate, batch
        self.acked: dict[str, str] = {}  # content -> message id
        self.calls: list[tuple[float, dict[str, int]]] = []  # (ack time, consistency offsets)
        self.latencies: list[tuple[float, float]] = []  # (ack time, seconds from first try to ack)
        self.stop_at = float("inf")  # monotonic time after which clients offer nothing more
        self.errors = Counter()
        self.gave_up = 0

    async def add(self, client: Client, session: str, turns: list[tuple[str, str]], timeout: float = 600):
        """AddMessages until acknowledged (same key every try); returns the reply, or None after timeout."""
        request = messages_pb2.AddMessagesRequest(
            workspace_id=self.workspace,
            session_id=session,
            idempotency_key=uuid.uuid4().hex,
            messages=[messages_pb2.NewMessage(peer_id=p, content=c) for p, c in turns],
        )
        first = time.monotonic()
        deadline = first + timeout
        while time.monotonic() < deadline:
            try:
                reply = await client.messages.AddMessages(request, timeout=15)
            except grpc.aio.AioRpcError as err:
                self.errors[err.code().name] += 1
                await asyncio.sleep(0.5)
                continue
            now = time.monotonic()
            for (_, content), mid in zip(turns, reply.message_ids, strict=True):
                self.acked[content] = mid
            self.calls.append((now, parse_token(reply.consistency_token)))
            self.latencies.append((now, now - first))
            return reply
        self.gave_up += 1
        return None

    async def client(self, index: int, count: int) -> None:
        session, (a, b) = self.sessions[index % len(self.sessions)]
        per_call = self.batch / (self.rate / len(self.sessions)) if self.rate else 0
        async with aio_channel(f"127.0.0.1:{self.state.api_port}", self.state.admin_token()) as channel:
            c = Client(channel)
            sent = 0
            while sent < count and time.monotonic() < self.stop_at:
                started = time.monotonic()
                n = min(self.batch, count - sent)
                turns = [
                    (
                        (a, b)[(sent + i) % 2],
                        f"{session} turn {sent + i}: I keep thinking about "
                        f"{random.choice(TOPICS)} since day {random.randint(1, 28)}.",
                    )
                    for i in range(n)
                ]
                await self.add(c, session, turns)
                sent += n
                await asyncio.sleep(max(0.0, per_call - (time.monotonic() - started)))

    async def run(self, total: int) -> None:
        share = [total // len(self.sessions) + (i < total % len(self.sessions)) for i in range(len(self.sessions))]
        await asyncio.gather(*(self.client(i, n) for i, n in enumerate(share)))


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


# --------------------------------------------------------------------------- watching Postgres


class Watcher(threading.Thread):
    """Polls projection_offsets every 100 ms: when each partition moved (for projection lag per call)."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.timeline: dict[str, list[tuple[float, int]]] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        last: dict[str, int] = {}
        while not self.stopping.wait(0.1):
            try:
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=2) as conn:
                    while not self.stopping.wait(0.1):
                        rows = conn.execute("SELECT topic, partition, next_offset FROM peerlog.projection_offsets")
                        t = time.monotonic()
                        for topic, part, nxt in rows.fetchall():
                            tp = f"{topic}:{part}"
                            if last.get(tp) != nxt:
                                last[tp] = nxt
                                self.timeline.setdefault(tp, []).append((t, nxt))
            except psycopg.Error:
                continue  # Postgres is being restarted


def query(dsn: str, sql: str, params=()) -> list[tuple]:
    """One query on a fresh connection, retried while Postgres is away."""
    for _ in range(600):
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                return conn.execute(sql, params).fetchall()
        except psycopg.OperationalError:
            time.sleep(0.5)
    raise TimeoutError(f"Postgres did not answer: {sql}")


def batch_message_ids(dsn: str, workspace: str, states: tuple[str, ...]) -> set[str]:
    """The messages of the workspace's derivation batches in one of `states`."""
    rows = query(
        dsn,
        "SELECT DISTINCT unnest(message_ids) FROM peerlog.derivation_batches "
        "WHERE workspace_id = %s AND state = ANY(%s)",
        (workspace, list(states)),
    )
    return {r[0] for r in rows}


def derived_ids(dsn: str, workspace: str) -> set[str]:
    return batch_message_ids(dsn, workspace, ("done",))


def batches_in(dsn: str, workspace: str, state: str) -> int:
    """How many of the workspace's derivation batches are in `state`."""
    sql = "SELECT count(*) FROM peerlog.derivation_batches WHERE workspace_id = %s AND state = %s"
    return query(dsn, sql, (workspace, state))[0][0]


# --------------------------------------------------------------------------- faults


class Chaos:
    """Injects the planned faults at random moments and measures each one's recovery."""

    def __init__(self, state, root: Path, supervisor: Supervisor, load: Load, args) -> None:
        self.state, self.root, self.supervisor, self.load = state, root, supervisor, load
        self.dsn = sql_dsn(state.database_url)
        self.rng = random.Random(args.seed)
        plan = ["kill"] * args.kills + ["broker"] * args.broker_restarts + ["postgres"] * args.postgres_restarts
        self.rng.shuffle(plan)
        self.plan = plan
        self.gap = (args.min_gap, args.max_gap)
        self.victims = tuple(args.kill_only or KILLABLE)
        self.faults: list[dict] = []
        self.broker_restarts = self.postgres_restarts = 0

    async def run(self, client: Client) -> None:
        probes = []
        for kind in self.plan:
            await asyncio.sleep(self.rng.uniform(*self.gap))
            fault = {"fault": kind, "at": round(time.time(), 3)}
            started = time.monotonic()
            if kind == "kill":
                fault["process"] = self.rng.choice(self.victims)
                fault["pid"] = self.supervisor.kill(fault["process"])
            elif kind == "broker":
                await asyncio.to_thread(self.restart_broker, fault)
            else:
                await asyncio.to_thread(self.restart_postgres, fault)
            fault["outage_s"] = round(time.monotonic() - started, 2)
            self.faults.append(fault)
            # the probe runs beside the next faults: a deployment does not wait for recovery either
            probes.append(asyncio.create_task(self.measure(client, fault, started)))
        await asyncio.gather(*probes)

    async def measure(self, client: Client, fault: dict, started: float) -> None:
        fault.update(await self.probe(client, started))
        log(f"fault {self.faults.index(fault) + 1}/{len(self.plan)}: {fault}")

    def restart_broker(self, fault: dict) -> None:
        kafka_dir = self.root / "kafka"
        self.broker_restarts += 1
        # the first restart is a clean one, the next a SIGKILL (no controlled shutdown)
        fault["how"] = "SIGTERM" if self.broker_restarts == 1 else "SIGKILL"
        if fault["how"] == "SIGTERM":
            stop_broker(kafka_dir)
        else:
            os.kill(running_broker(kafka_dir)["pid"], signal.SIGKILL)
            time.sleep(1)
        time.sleep(2)  # the log stays away a moment, as a real restart would
        KafkaBroker(kafka_dir, port=self.state.kafka_port).start(timeout=300)

    def restart_postgres(self, fault: dict) -> None:
        self.postgres_restarts += 1
        # the first restart is a fast shutdown, the next an immediate one: no checkpoint, so the start
        # recovers from the WAL what the commits wrote, as after a crash
        crash = self.postgres_restarts > 1
        fault["how"] = "immediate shutdown (crash)" if crash else "fast shutdown"
        pg = EmbeddedPostgres(self.root / "postgres", port=self.state.postgres_port)
        pg.stop(immediate=crash)
        time.sleep(2)
        pg.start()

    async def probe(self, client: Client, started: float) -> dict:
        """Seconds from the fault until a new message is acknowledged, projected and derived."""
        content = f"probe {uuid.uuid4().hex}: I am checking whether the memory service is back."
        reply = await self.load.add(client, "probe", [("probe", content)])
        if reply is None:
            return {"recovered": False}
        acked = time.monotonic() - started
        mid = reply.message_ids[0]
        out = {"ack_s": round(acked, 2)}
        for name, sql in (
            ("projected_s", "SELECT 'done' FROM peerlog.messages WHERE message_id = %s"),
            # a batch the model kept failing is finished too: dead-lettered, to be retried by an operator
            (
                "derived_s",
                "SELECT state FROM peerlog.derivation_batches WHERE %s = ANY(message_ids) AND state <> 'in_flight'",
            ),
        ):
            deadline = time.monotonic() + 300
            while not (rows := await asyncio.to_thread(query, self.dsn, sql, (mid,))):
                if time.monotonic() > deadline:
                    out[name] = None
                    break
                await asyncio.sleep(0.2)
            else:
                out[name] = round(time.monotonic() - started, 2) if rows[0][0] == "done" else None
                out["dead_lettered"] = rows[0][0] == "dead_lettered" or out.get("dead_lettered", False)
        out["recovered"] = out.get("derived_s") is not None or out.get("dead_lettered", False)
        return out


# --------------------------------------------------------------------------- verification


def read_topic(bootstrap: str, topic: str) -> list:
    """Every committed event on the topic, up to its end offsets now."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    meta = consumer.list_topics(topic, timeout=30).topics[topic]
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in meta.partitions}
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    events, done = [], {p for p, end in ends.items() if end == 0}
    try:
        while len(done) < len(ends):
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is None:
                    events.append(decode(msg.value()))
            for p, end in ends.items():
                position = consumer.position([TopicPartition(topic, p)])[0].offset
                if position >= end:
                    done.add(p)
    finally:
        consumer.close()
    return events


def wait_settled(dsn: str, workspace: str, acked_ids: set[str], timeout: float) -> float:
    """Wait until every acknowledged message is in a finished batch (derived, or dead-lettered after the
    model kept failing) and no batch is in flight; return the seconds taken, -1 on timeout."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if not batches_in(dsn, workspace, "in_flight") and acked_ids <= batch_message_ids(
            dsn, workspace, ("done", "dead_lettered")
        ):
            return time.monotonic() - started
        time.sleep(2)
    return -1.0


def retry_dead_letters(state, dsn: str, workspace: str, model: FlakyModel, acked_ids: set[str], args) -> dict:
    """Once the model is fixed, what an operator does: `peerlog derivations retry` for the workspace; then
    wait until every acknowledged message is derived. The figures say what was parked and how it ended."""
    dead = batch_message_ids(dsn, workspace, ("dead_lettered",)) & acked_ids
    batches = batches_in(dsn, workspace, "dead_lettered")
    out = {"dead_lettered_batches": batches, "dead_lettered_messages": len(dead)}
    if not batches:
        return out
    model.heal()
    started = time.monotonic()
    cli = [sys.executable, "-m", "services.cli.main", "derivations", "retry", "-w", workspace]
    done = subprocess.run(
        cli, env={**os.environ, **state.env()}, cwd=ROOT, capture_output=True, text=True, timeout=args.drain_timeout
    )
    out.update(retry_exit=done.returncode, retry_output=(done.stdout + done.stderr).strip().splitlines()[-5:])
    while not acked_ids <= derived_ids(dsn, workspace) and time.monotonic() - started < args.drain_timeout:
        time.sleep(2)
    out["derived_after_s"] = round(time.monotonic() - started, 1)
    out["still_not_derived"] = len(acked_ids - derived_ids(dsn, workspace))
    return out


def wait_quiet(dsn: str, workspace: str, acked_ids: set[str], timeout: float) -> float:
    """Wait until every acknowledged message is derived and no batch is open; return the seconds taken."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        open_batches = query(
            dsn,
            "SELECT count(*) FROM peerlog.derivation_batches WHERE workspace_id = %s AND state <> 'done'",
            (workspace,),
        )[0][0]
        if not open_batches and acked_ids <= derived_ids(dsn, workspace):
            return time.monotonic() - started
        time.sleep(2)
    return -1.0


def display_name(peer_id: str) -> str:
    """Every other peer has a display name, so the proof covers the name each message carries."""
    number = peer_id.removeprefix("p")
    return f"Peer {number}" if number.isdigit() and int(number) % 2 == 0 else ""


def named(peer_id: str) -> dict:
    """GetOrCreatePeer's metadata for `peer_id`: its display name, if it has one."""
    name = display_name(peer_id)
    return {"metadata": Struct(fields={"name": Value(string_value=name)})} if name else {}


def misnamed(dsn: str, workspace: str, session_events: list) -> dict:
    """Messages whose author name is not their author's display name, on the log and as projected."""
    rows = query(dsn, "SELECT peer_id, author_name FROM peerlog.messages WHERE workspace_id = %s", (workspace,))
    return {
        "misnamed_on_log": sum(e.author_name != display_name(e.peer_id) for e in session_events),
        "misnamed_in_projection": sum((name or "") != display_name(peer) for peer, name in rows),
    }


def verify(state, workspace: str, load: Load) -> dict:
    dsn = sql_dsn(state.database_url)
    acked = load.acked
    acked_ids = set(acked.values())
    prefix = "peerlog."
    session_events = [
        e
        for e in read_topic(state.bootstrap_servers, SESSIONS.full_name(prefix))
        if isinstance(e, MessageAppended) and e.workspace_id == workspace
    ]
    on_log = Counter(e.content for e in session_events)
    projected = Counter(
        dict(
            query(
                dsn,
                "SELECT content, count(*) FROM peerlog.messages WHERE workspace_id = %s GROUP BY content",
                (workspace,),
            )
        )
    )
    obs_events = [
        e
        for e in read_topic(state.bootstrap_servers, OBSERVATIONS.full_name(prefix))
        if getattr(e, "workspace_id", None) == workspace
    ]
    coverage = Counter(m for e in obs_events if isinstance(e, BatchDerived) for m in e.message_ids)
    added = Counter((e.observer_id, e.observed_id, e.content) for e in obs_events if isinstance(e, ObservationAdded))
    rows = query(
        dsn,
        "SELECT count(*) FROM (SELECT observer_id, observed_id, content_key, level, session_id "
        "FROM peerlog.observations WHERE workspace_id = %s GROUP BY 1, 2, 3, 4, 5 "
        "HAVING count(*) > 1) d",
        (workspace,),
    )
    pending = dict(
        query(
            dsn,
            "SELECT state, count(*) FROM peerlog.derivation_batches WHERE workspace_id = %s "
            "AND state <> 'done' GROUP BY state",
            (workspace,),
        )
    )
    dead = query(dsn, "SELECT count(*) FROM peerlog.dead_letters WHERE workspace_id = %s", (workspace,))[0][0]
    parked = still_parked(state.database_url, workspace)
    return {
        "acknowledged": len(acked),
        "on_log": sum(on_log[c] > 0 for c in acked),
        "lost": sum(on_log[c] == 0 for c in acked),
        "lost_in_projection": sum(projected[c] == 0 for c in acked),
        # a retried call whose first try was appended after all: a second copy under the same idempotency
        # key, which the projector and the processors skip
        "repeated_appends_on_log": sum(on_log[c] > 1 for c in on_log),
        "duplicated_in_projection": sum(projected[c] > 1 for c in projected),
        "unacknowledged_on_log": sum(1 for c in on_log if c not in acked),
        "derived_exactly_once": sum(coverage[m] == 1 for m in acked_ids),
        "derived_never": sum(coverage[m] == 0 for m in acked_ids),
        "derived_more_than_once": sum(coverage[m] > 1 for m in acked_ids),
        "observations_added_twice_on_log": sum(n > 1 for n in added.values()),
        "observations_duplicated_in_projection": rows[0][0],
        "batches_not_done": pending,  # rows as projected: a retry that batched differently leaves some
        "batches_still_parked": parked,  # as GetProcessingStatus and the metrics count them: 0 after a retry
        "dead_letters": dead,
        **misnamed(dsn, workspace, session_events),
    }


def still_parked(database_url: str, workspace: str) -> int:
    """Dead-lettered batches with a message no retry has derived since (projections.status_reads)."""
    from sqlalchemy import create_engine, func, select

    from projections.schema import derivation_batches
    from projections.status_reads import outstanding

    b = derivation_batches.c
    engine = create_engine(database_url).execution_options(schema_translate_map={None: "peerlog"})
    try:
        with engine.connect() as conn:
            stmt = select(func.count()).select_from(derivation_batches)
            return conn.scalar(stmt.where(b.workspace_id == workspace, b.state == "dead_lettered", outstanding(b)))
    finally:
        engine.dispose()


def rebuild_check(state) -> dict:
    os.environ.update(state.env())
    from projections.rebuild import rebuild
    from services.settings import Settings

    report = rebuild(Settings(), progress=log)
    return {
        "resumed": report.resumed,
        "events": report.events,
        "seconds": round(report.seconds, 1),
        "switched": report.switched,
        "differing_rows": {t: n for t, n in report.differences.items() if n},
    }


def guarded(check, *args) -> dict:
    """The check's figures, or the error it raised: a failed check must not lose the run's other figures."""
    try:
        return check(*args)
    except Exception as err:  # noqa: BLE001 - reported in the JSON, and the run fails
        log(f"{check.__name__} failed: {err!r}")
        return {"error": repr(err)}


def lag_after_faults(faults: list[dict], load: Load, timeline, window: float = 30.0) -> None:
    """Per fault: p99 of projection lag (ack -> projected) of load calls acked in the window after recovery."""
    wall_to_mono = time.time() - time.monotonic()
    for f in faults:
        start = f["at"] - wall_to_mono + (f.get("ack_s") or 0)
        lags = []
        for t, parts in load.calls:
            if start <= t < start + window:
                seen = projected_at(timeline, parts)
                if seen is not None:
                    lags.append(max(0.0, seen - t) * 1000)
        f["lag_p99_ms_next_30s"] = pct(lags, 0.99)
        f["calls_next_30s"] = len(lags)


# --------------------------------------------------------------------------- main


async def seed_pairs(state, prefix: str, n_sessions: int) -> tuple[str, list[tuple[str, tuple[str, str]]]]:
    """A fresh workspace of `n_sessions` two-peer sessions (s<i> with p<2i> and p<2i+1)."""
    workspace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    sessions = [(f"s{i}", (f"p{2 * i}", f"p{2 * i + 1}")) for i in range(n_sessions)]
    async with aio_channel(f"127.0.0.1:{state.api_port}", state.admin_token()) as channel:
        c = Client(channel)
        await c.workspace(workspace)
        for p in {p for _, pair in sessions for p in pair}:
            await c.peer(workspace, p)
        for s, pair in sessions:
            await c.session(workspace, s, members=list(pair))
    return workspace, sessions


def model_reply(delay_s: float):
    def handler(request):
        if is_deriver(request):
            return Reply(content=extract_each_turn(request).content, delay_s=delay_s)
        return Reply(content="The peers talked about their plans and their week.", delay_s=delay_s)

    return handler


# how a model provider fails: no answer within the client's timeout, a server error, a rate limit, text
# that is not JSON, and JSON of the wrong shape
MODEL_FAULTS = ("timeout", "server_error", "rate_limited", "not_json", "wrong_shape")


class FlakyModel:
    """The test model, failing a share of its calls (`--model-faults`), each in one of MODEL_FAULTS drawn
    from a seeded generator. `heal()` ends the faults: the model is fixed before a retry."""

    def __init__(self, delay_s: float, share: float, timeout_s: float, seed: int) -> None:
        self.delay_s, self.share, self.timeout_s = delay_s, share, timeout_s
        self.healthy = model_reply(delay_s)
        self.rng = random.Random(seed)
        self.lock = threading.Lock()  # the server answers each request on its own thread
        self.answered: Counter = Counter()

    def heal(self) -> None:
        with self.lock:
            self.share = 0.0

    def __call__(self, request) -> Reply:
        with self.lock:
            fault = self.rng.choice(MODEL_FAULTS) if self.rng.random() < self.share else "ok"
            self.answered[fault] += 1
        if fault == "timeout":
            return Reply(content="too late", delay_s=self.timeout_s + 1)
        if fault == "server_error":
            return Reply(status=500, delay_s=self.delay_s)
        if fault == "rate_limited":
            return Reply(status=429, headers={"retry-after": "1"})
        if fault == "not_json":
            return Reply(content='{"facts": [{"content": "The target said', delay_s=self.delay_s)
        if fault == "wrong_shape":
            return Reply(content={"facts": [{"text": 3}], "note": "not the schema"}, delay_s=self.delay_s)
        return self.healthy(request)


async def chaos_run(args, root: Path) -> dict:
    result: dict = {
        "benchmark": "chaos",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "machine": machine(),
        "load_average_before": os.getloadavg(),
    }
    with ModelServer() as server:
        model = FlakyModel(args.delay_ms / 1000, args.model_faults, args.model_timeout_s, args.seed)
        server.reply_with(model)
        env = {
            "PEERLOG_LLM_BASE_URL": server.base_url,
            "PEERLOG_LLM_MODEL": "chaos-model",
            "PEERLOG_LLM_TIMEOUT_S": str(args.model_timeout_s),
            "PEERLOG_DERIVER_TICK_S": "1",
            "PEERLOG_DERIVER_MAX_WAIT_S": str(args.max_wait_s),
        }
        supervisor = watcher = None
        if not (root / "stack.json").exists():
            root.mkdir(parents=True, exist_ok=True)
            pin_fresh_ports(root)  # never the dev defaults another engineer's stack may hold
        try:
            state = up(root, progress=log, model_env=env)
            supervisor = Supervisor(state)
            watcher = Watcher(sql_dsn(state.database_url))
            workspace = f"chaos-{uuid.uuid4().hex[:6]}"
            sessions = [
                (f"s{i}", (f"p{(2 * i) % args.peers}", f"p{(2 * i + 1) % args.peers}")) for i in range(args.sessions)
            ]
            async with aio_channel(f"127.0.0.1:{state.api_port}", state.admin_token()) as channel:
                c = Client(channel)
                await c.workspace(workspace)
                for p in {p for _, pair in sessions for p in pair} | {"probe"}:
                    await c.peer(workspace, p, **named(p))
                for s, pair in sessions:
                    await c.session(workspace, s, members=list(pair))
                await c.session(workspace, "probe", members=["probe"])
                supervisor.start()
                watcher.start()
                load = Load(state, workspace, sessions, args.rate, args.batch)
                chaos = Chaos(state, root, supervisor, load, args)
                rebuilds = Rebuilds(state, args.rebuilds, (args.min_gap, args.max_gap), args.seed)
                started = time.monotonic()
                await asyncio.gather(load.run(args.messages), chaos.run(c), rebuilds.run())
                load_s = time.monotonic() - started
            log(f"load and faults done in {load_s:.0f} s: {len(load.acked)} acknowledged; draining")
            dsn, acked_ids = sql_dsn(state.database_url), set(load.acked.values())
            drain_s = await asyncio.to_thread(wait_settled, dsn, workspace, acked_ids, args.drain_timeout)
            retried = await asyncio.to_thread(retry_dead_letters, state, dsn, workspace, model, acked_ids, args)
            supervisor.stop()
            lag_after_faults(chaos.faults, load, watcher.timeline)
            log("verifying")
            checks = guarded(verify, state, workspace, load)
            checks["rebuild"] = guarded(rebuild_check, state)
        finally:
            if watcher is not None:
                watcher.stopping.set()
            if supervisor is not None and supervisor.is_alive():
                supervisor.stop()  # joined first, or it restarts what down() stops
            down(root, progress=log)
    kills = [f for f in chaos.faults if f["fault"] == "kill"]
    result.update(
        {
            "config": {k: v for k, v in vars(args).items() if k != "out"},
            "load_seconds": round(load_s, 1),
            "drain_seconds": round(drain_s, 1),
            "offered_messages_per_s": round(args.messages / load_s, 1),
            "kills": len(kills),
            "kills_by_process": dict(Counter(f["process"] for f in kills)),
            "broker_restarts": sum(f["fault"] == "broker" for f in chaos.faults),
            "postgres_restarts": sum(f["fault"] == "postgres" for f in chaos.faults),
            "process_restarts_by_supervisor": dict(supervisor.restarts),
            "crashes_not_injected": supervisor.crashes,
            "rpc_errors_retried": dict(load.errors),
            "calls_given_up": load.gave_up,
            **checks,
            "recovery_s": {
                "ack_p50": pct([f["ack_s"] for f in chaos.faults if "ack_s" in f], 0.5),
                "derived_p50": pct([f["derived_s"] for f in chaos.faults if f.get("derived_s")], 0.5),
                "derived_max": pct([f["derived_s"] for f in chaos.faults if f.get("derived_s")], 1.0),
            },
            "faults": chaos.faults,
            "model_calls": len(server.chat_requests()),
            "model_answers": dict(model.answered),
            "dead_letter_retry": retried,
            "rebuilds_during_load": rebuilds.runs,
            "rebuilds_failed": len(rebuilds.failed),
            "load_average_after": os.getloadavg(),
        }
    )
    return result


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--peers", type=int, default=40)
    p.add_argument("--batch", type=int, default=10, help="messages per AddMessages call")
    p.add_argument("--rate", type=float, default=200, help="messages/s offered in all (0: as fast as acks come)")
    p.add_argument("--delay-ms", type=int, default=200, help="the test model's latency per call")
    p.add_argument("--max-wait-s", type=float, default=10, help="the deriver's batch age limit")
    p.add_argument("--model-faults", type=float, default=0.0, help="share of model calls that fail (MODEL_FAULTS)")
    p.add_argument("--model-timeout-s", type=float, default=5.0, help="the model client's timeout per request")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--kill-only", choices=KILLABLE, nargs="+", help="the processes SIGKILLed (default: any of them)")
    p.add_argument("--broker-restarts", type=int, default=2)
    p.add_argument("--postgres-restarts", type=int, default=1)
    p.add_argument("--rebuilds", type=int, default=0, help="`peerlog projections rebuild` runs during the load")
    p.add_argument("--min-gap", type=float, default=5, help="seconds between faults, at least")
    p.add_argument("--max-gap", type=float, default=20)
    p.add_argument("--drain-timeout", type=float, default=900)
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--dir", type=Path, help="stack directory (default: a new one under /tmp, kept on failure)")
    p.add_argument("--out", type=Path, default=ROOT / "tests/bench/results/chaos.json")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    root = (args.dir or Path(tempfile.mkdtemp(prefix="peerlog-chaos-"))).resolve()
    result = asyncio.run(chaos_run(args, root))
    ok = (
        "error" not in result
        and result["lost"] == 0
        and result["duplicated_in_projection"] == 0
        and result["derived_never"] == 0
        and result["derived_more_than_once"] == 0
        # without model faults nothing may be parked; with them, the retry must derive every parked message
        and (result["config"]["model_faults"] > 0 or result["dead_letter_retry"]["dead_lettered_batches"] == 0)
        and not result["dead_letter_retry"].get("still_not_derived")
        and result["batches_still_parked"] == 0
        and result["observations_added_twice_on_log"] == 0
        and result["misnamed_on_log"] == 0
        and result["misnamed_in_projection"] == 0
        and result["rebuild"].get("switched") is True
        and not result["rebuild"].get("differing_rows")
        and result["rebuilds_failed"] == 0
    )
    result["passed"] = ok
    text = json.dumps(result, indent=2, default=str)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
