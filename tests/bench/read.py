#!/usr/bin/env python
"""Read benchmark: GetContext (with a search query) and SearchMessages latency on a large workspace.

    .venv/bin/python tests/bench/read.py [--messages 50000] [--observations 100000] [--clients 8] \
        [--seconds 20] [--warmup 3] [--keep] [--out tests/bench/results/read.json]

Starts the dev stack (infra.stack.up) on fresh ports and stops its worker (nothing here needs a
processor, and the deriver would call a chat model). The workspace is built THROUGH THE LOG: the
script embeds every message and observation text with the real local embedder (the default model,
e5-small-v2, in batches), appends WorkspaceCreated, PeerCreated, SessionCreated, MemberJoined, MessageAppended,
MessagesEmbedded and ObservationAdded events to Kafka with the project's producer (EventLog), and
waits for the stack's projector to catch up. Then it runs VACUUM ANALYZE (what autovacuum would do
after a bulk load) and measures each phase with --clients concurrent gRPC clients (one channel each)
calling back to back for --seconds after --warmup. Latency is per call, client-side, including
embedding the query text (no chat model is involved in these RPCs).

Every peer of the workspace is a member of about 3/40 of its sessions. A "newcomer" peer is a member of
only 2 sessions of its own (2 × --per-session messages): its phases measure a narrow perspective in a
large workspace. A "long" session of 2,000 messages (--long-messages), between the first two peers, measures
GetContext in a conversation that has gone on for a while. A kept stack without the newcomer's or the
long session's part gets just that part appended. --crowd N adds N peers that take part in nothing, as in
a workspace holding every user of an app.

Prints one JSON object on stdout (progress on stderr) and writes it to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
import psycopg  # noqa: E402

from infra import stack  # noqa: E402
from infra.stack import sql_dsn  # noqa: E402
from peerlog.v1 import (  # noqa: E402  # noqa: E402
    common_pb2,
    context_pb2,
    peers_pb2,
    sessions_pb2,
    workspaces_pb2,
)
from projections.db import sync_engine  # noqa: E402
from projections.settings import DatabaseSettings  # noqa: E402
from projections.vector_model_reads import vectors_by_model  # noqa: E402
from services.api.channels import aio_channel  # noqa: E402
from services.bus.producer import EventLog  # noqa: E402
from services.bus.settings import KafkaSettings  # noqa: E402
from services.cli.client import Client  # noqa: E402
from services.embedder.policy import embedded  # noqa: E402
from services.events import (  # noqa: E402
    Level,
    MemberJoined,
    MessageAppended,
    ObservationAdded,
    PeerCreated,
    ProducerInfo,
    SessionCreated,
    WorkspaceCreated,
)
from services.llm.embeddings import LocalOnnxEmbedder  # noqa: E402
from services.llm.settings import EmbeddingSettings  # noqa: E402
from tests.bench.ingest import (  # noqa: E402
    CpuMeter,
    idle_check,
    machine,
    pct,
    pin_fresh_ports,
    stack_pids,
    stop_others,
)

WORKSPACE = "bench-read"
BENCH = ProducerInfo(component="bench-read", version="0.1.0")
TARGETS_MS = {"GetContext": 25.0, "SearchMessages": 30.0}

WHO = ["I", "My sister", "Our neighbour", "The coach", "My manager", "Grandpa", "A friend from school", "The vet"]
DID = [
    "planted",
    "repaired",
    "painted",
    "sold",
    "booked",
    "cancelled",
    "cooked",
    "photographed",
    "forgot",
    "borrowed",
    "recommended",
    "complained about",
]
WHAT = [
    "the tomatoes",
    "a bicycle",
    "the kitchen table",
    "tickets to Lisbon",
    "a jazz concert",
    "the old piano",
    "lentil soup",
    "the garden fence",
    "a used laptop",
    "the dentist appointment",
    "a marathon plan",
    "the greenhouse",
    "a birthday cake",
    "the car insurance",
    "a sourdough starter",
    "the cello lesson",
]
WHEN = [
    "on Monday",
    "last weekend",
    "in March",
    "after work",
    "before the storm",
    "during the holidays",
    "this morning",
    "two years ago",
    "at the farmers market",
    "while it rained",
]
WHY = [
    "because it was cheap",
    "to surprise everyone",
    "since the old one broke",
    "for the first time",
    "again, sadly",
    "with a lot of help",
    "and it went well",
    "but nobody noticed",
]
QUERIES = [
    "who repaired the bicycle",
    "tickets to Lisbon",
    "sourdough starter",
    "jazz concert last weekend",
    "garden fence painted",
    "dentist appointment cancelled",
    "marathon training",
    "birthday cake surprise",
    "car insurance",
    "old piano sold",
    "cello lesson",
    "lentil soup in March",
    "greenhouse tomatoes",
    "used laptop borrowed",
    "what happened before the storm",
    "photographed the kitchen table",
]


def log(msg: str) -> None:
    print(f"[read-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sentence(rng: random.Random) -> str:
    return f"{rng.choice(WHO)} {rng.choice(DID)} {rng.choice(WHAT)} {rng.choice(WHEN)} {rng.choice(WHY)}."


# --------------------------------------------------------------------------- the workspace, through the log


def plan(args, rng: random.Random) -> dict:
    """Peers, sessions with their members, message and observation texts (no events yet)."""
    peers = [f"p{i}" for i in range(args.peers)]
    sessions = {f"s{i}": rng.sample(peers, 3) for i in range(args.messages // args.per_session)}
    pairs = [(o, t) for o in peers for t in peers][: args.pairs]
    # texts are drawn from pools of --distinct sentences each, so setup time stays bounded (every distinct
    # text is embedded once); a message text recurs ~2 times, an observation ~4 times (across pairs)
    message_pool = [sentence(rng) for _ in range(min(args.distinct, args.messages))]
    observation_pool = [
        f"The peer {s[0].lower()}{s[1:]}" for s in (sentence(rng) for _ in range(min(args.distinct, args.observations)))
    ]
    return {
        "peers": peers,
        "sessions": sessions,
        "pairs": pairs,
        "messages": [rng.choice(message_pool) for _ in range(args.messages)],
        "observations": [rng.choice(observation_pool) for _ in range(args.observations)],
    }


# a narrow perspective: a peer that is a member of 2 sessions of its own (per_session messages each) and
# of none of the others, as a newcomer to a large workspace is
NEWCOMER, NEWCOMER_SESSIONS = "newcomer", ("n0", "n1")


def newcomer_plan(p: dict, args) -> dict:
    """The newcomer's sessions, their members and their message texts (drawn from the workspace's own);
    its own random stream, so `plan` is unchanged."""
    rng = random.Random(20261202)
    return {
        "sessions": {s: [NEWCOMER, *rng.sample(p["peers"], 2)] for s in NEWCOMER_SESSIONS},
        "messages": [rng.choice(p["messages"]) for _ in range(args.per_session * len(NEWCOMER_SESSIONS))],
    }


# one session as long as an agent's running conversation gets, between the peers of the bench's second pair
LONG_SESSION = "l0"


def long_plan(p: dict, args) -> dict:
    """The long session, its members and its message texts (drawn from the workspace's own); its own
    random stream, so `plan` is unchanged."""
    rng = random.Random(20261204)
    observer, target = p["pairs"][1]
    return {
        "sessions": {LONG_SESSION: [observer, target]},
        "messages": [rng.choice(p["messages"]) for _ in range(args.long_messages)],
    }


def newcomer_events(n: dict, vectors, rng: random.Random):
    """The newcomer's part of the log: its peer, its sessions with their members, their messages."""
    yield [PeerCreated(workspace_id=WORKSPACE, peer_id=NEWCOMER, producer=BENCH)]
    yield list(_sessions_created(n["sessions"]))
    yield list(_messages_appended(n["sessions"], n["messages"], vectors, rng, prefix="n"))


def long_events(part: dict, vectors, rng: random.Random):
    """The long session's part of the log: the session with its members, its messages, 1,000 at a time."""
    yield list(_sessions_created(part["sessions"]))
    appended = list(_messages_appended(part["sessions"], part["messages"], vectors, rng, prefix="l"))
    for i in range(0, len(appended), 1000):
        yield appended[i : i + 1000]


def embed_all(texts: list[str], embedder: LocalOnnxEmbedder, label: str) -> list[list[float]]:
    """Vectors for `texts`; a text that repeats is embedded once (same text, same vector)."""
    unique = list(dict.fromkeys(texts))
    vectors: list[list[float]] = []
    started = time.monotonic()
    for i in range(0, len(unique), 4096):
        vectors += embedder.embed_sync(unique[i : i + 4096])
        log(f"  embedded {len(vectors)}/{len(unique)} distinct {label} ({time.monotonic() - started:.0f} s)")
    by_text = dict(zip(unique, vectors, strict=True))
    return [by_text[t] for t in texts]


def events(p: dict, message_vectors, observation_vectors, rng: random.Random):
    """The log of the workspace, in an order the API could have written it, in chunks."""
    yield [WorkspaceCreated(workspace_id=WORKSPACE, producer=BENCH)]
    yield [PeerCreated(workspace_id=WORKSPACE, peer_id=peer, producer=BENCH) for peer in p["peers"]]
    yield list(_sessions_created(p["sessions"]))
    chunk = []
    for e in _messages_appended(p["sessions"], p["messages"], message_vectors, rng, prefix="m"):
        chunk.append(e)
        if len(chunk) >= 2000:
            yield chunk
            chunk = []
    for i, (text, vector) in enumerate(zip(p["observations"], observation_vectors, strict=True)):
        observer, observed = p["pairs"][i % len(p["pairs"])]
        chunk.append(
            ObservationAdded(
                workspace_id=WORKSPACE,
                observer_id=observer,
                observed_id=observed,
                observation_id=f"o{i}",
                level=Level.EXPLICIT,
                content=text,
                embedding=tuple(vector),
                embedding_model=EmbeddingSettings().model,
                producer=BENCH,
            )
        )
        if len(chunk) >= 2000:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _sessions_created(sessions: dict):
    joined = datetime.now(UTC)
    for s, members in sessions.items():
        yield SessionCreated(workspace_id=WORKSPACE, session_id=s, producer=BENCH)
        for m in members:
            yield MemberJoined(workspace_id=WORKSPACE, session_id=s, peer_id=m, joined_at=joined, producer=BENCH)


def _messages_appended(sessions: dict, texts: list[str], vectors, rng: random.Random, prefix: str):
    """Each message (spread over the sessions in turn, by one of their members) and its embedding."""
    session_ids = list(sessions)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
        s = session_ids[i % len(session_ids)]
        m = MessageAppended(
            workspace_id=WORKSPACE,
            session_id=s,
            message_id=f"{prefix}{i}",
            peer_id=rng.choice(sessions[s]),
            content=text,
            created_at=start + timedelta(minutes=10 * i),
            producer=BENCH,
        )
        yield m
        yield embedded(m, vector, EmbeddingSettings().model, BENCH)


def wait_projected(dsn: str, messages: int, observations: int, timeout: float = 3600) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            m = conn.execute("SELECT count(*) FROM peerlog.messages WHERE embedding IS NOT NULL").fetchone()[0]
            o = conn.execute("SELECT count(*) FROM peerlog.observations").fetchone()[0]
            log(f"  projected {m}/{messages} embedded messages, {o}/{observations} observations")
            if m >= messages and o >= observations:
                return
            time.sleep(5)
    raise RuntimeError("the projector did not catch up in time")


def refuse_another_model(database_url: str) -> None:
    """Stop when most of a kept stack's vectors are of another model than the one queries would be
    embedded with: reads compare only the active model's vectors, so its semantic lists would be (nearly)
    empty. A few of another model (embedded while the stack ran under another setting) are reported."""
    active = EmbeddingSettings().model
    engine = sync_engine(DatabaseSettings(url=database_url))
    try:
        with engine.connect() as conn:
            held = dict(conn.execute(vectors_by_model()).all())
    finally:
        engine.dispose()
    others = {model: n for model, n in held.items() if model != active}
    if not others:
        return
    if sum(others.values()) > held.get(active, 0):
        model = max(others, key=others.__getitem__)
        raise SystemExit(
            f"the kept stack's vectors are mostly {model}'s, not {active}'s: run with"
            f" PEERLOG_EMBEDDING_MODEL={model} or on a new --dir"
        )
    log(f"the kept stack holds {others} vectors of another model than {active}; they are not searched")


def built_parts(dsn: str, args) -> tuple[bool, bool, bool]:
    """Whether a kept stack (--dir) already holds the workspace's main part in full, the newcomer's and
    the long session's: what it holds is not built again."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        held = dict(
            conn.execute(
                "SELECT CASE WHEN session_id = ANY(%s) THEN 'newcomer' WHEN session_id = %s THEN 'long' ELSE 'main'"
                " END, count(*) FROM peerlog.messages WHERE workspace_id = %s AND embedding IS NOT NULL GROUP BY 1",
                (list(NEWCOMER_SESSIONS), LONG_SESSION, WORKSPACE),
            ).fetchall()
        )
        o = conn.execute("SELECT count(*) FROM peerlog.observations WHERE workspace_id = %s", (WORKSPACE,)).fetchone()[
            0
        ]
    newcomer_messages = args.per_session * len(NEWCOMER_SESSIONS)
    return (
        (held.get("main", 0), o) == (args.messages, args.observations),
        held.get("newcomer", 0) == newcomer_messages,
        held.get("long", 0) == args.long_messages,
    )


def build(state, args) -> dict:
    rng = random.Random(20261130)
    timings = {}
    p = plan(args, rng)
    p["newcomer"] = newcomer_plan(p, args)
    p["long"] = long_plan(p, args)
    dsn = sql_dsn(state.database_url)
    refuse_another_model(state.database_url)
    main_built, newcomer_built, long_built = built_parts(dsn, args)
    if main_built and newcomer_built and long_built:
        log("the kept stack already holds the workspace: setup skipped")
        return {"events_appended": 0, "timings": {"reused_stack": True}, "plan": p}
    # bulk: both cores, big batches; the model the stack's API embeds queries with
    embedder = LocalOnnxEmbedder(EmbeddingSettings(threads=2, batch_size=64))
    t = time.monotonic()
    parts = []
    if not main_built:
        message_vectors = embed_all(p["messages"], embedder, "messages")
        observation_vectors = embed_all(p["observations"], embedder, "observations")
        parts.append(events(p, message_vectors, observation_vectors, rng))
        timings["distinct_texts_embedded"] = len(set(p["messages"])) + len(set(p["observations"]))
    if not newcomer_built:
        parts.append(newcomer_events(p["newcomer"], embed_all(p["newcomer"]["messages"], embedder, "newcomer's"), rng))
    if not long_built:
        parts.append(long_events(p["long"], embed_all(p["long"]["messages"], embedder, "long session's"), rng))
    timings["embed_s"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    log_ = EventLog(KafkaSettings(bootstrap_servers=state.bootstrap_servers))
    log_.start()
    appended = 0
    for chunk in (c for part in parts for c in part):
        log_.append_sync(chunk)
        appended += len(chunk)
    log_.close()
    timings["append_s"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    wait_projected(dsn, args.messages + len(p["newcomer"]["messages"]) + args.long_messages, args.observations)
    timings["project_after_append_s"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE peerlog.messages")
        conn.execute("VACUUM ANALYZE peerlog.observations")
        conn.execute("VACUUM ANALYZE peerlog.memberships")
        conn.execute("VACUUM ANALYZE peerlog.sessions")
    timings["vacuum_analyze_s"] = round(time.monotonic() - t, 1)
    return {"events_appended": appended, "timings": timings, "plan": p}


CROWD = "crowd-"


def add_crowd(state, n: int) -> int:
    """Make the workspace hold `n` peers that take part in nothing (`crowd-<i>`), as a workspace holding
    every user of an app does: a search's cost should not grow with them. Appends only the missing
    ones, through the log; returns how many."""
    dsn = sql_dsn(state.database_url)
    query = "SELECT count(*) FROM peerlog.peers WHERE workspace_id = %s AND starts_with(peer_id, %s)"
    with psycopg.connect(dsn, autocommit=True) as conn:
        held = conn.execute(query, (WORKSPACE, CROWD)).fetchone()[0]
    missing = [f"{CROWD}{i:06d}" for i in range(held, n)]
    if not missing:
        return 0
    log_ = EventLog(KafkaSettings(bootstrap_servers=state.bootstrap_servers))
    log_.start()
    for i in range(0, len(missing), 1000):
        log_.append_sync(
            [PeerCreated(workspace_id=WORKSPACE, peer_id=p, producer=BENCH) for p in missing[i : i + 1000]]
        )
    log_.close()
    deadline = time.monotonic() + 600
    with psycopg.connect(dsn, autocommit=True) as conn:
        while conn.execute(query, (WORKSPACE, CROWD)).fetchone()[0] < n:
            if time.monotonic() > deadline:
                raise RuntimeError("the projector did not project the crowd's peers in 600 s")
            time.sleep(1)
        conn.execute("VACUUM ANALYZE peerlog.peers")
    log(f"added {len(missing)} peers that take part in nothing ({n} in all)")
    return len(missing)


# --------------------------------------------------------------------------- load


def calls(p: dict, token: str = ""):
    """name -> function(client, rng) -> awaitable, one per measured phase. `token`: a consistency token
    of an earlier write, which the client library attaches to every read that follows one."""
    sessions = p["sessions"]
    session_ids = list(sessions)

    def context_of(session: str, observer: str, target: str, api: Client, rng):
        return api.context.GetContext(
            context_pb2.GetContextRequest(
                workspace_id=WORKSPACE,
                session_id=session,
                token_budget=2000,
                observer_id=observer,
                target_id=target,
                search_query=rng.choice(QUERIES),
            )
        )

    def get_context(api: Client, rng):
        return context_of(rng.choice(session_ids), *rng.choice(p["pairs"]), api, rng)

    def search_as(perspective: str, api: Client, rng):
        return api.workspaces.SearchMessages(
            workspaces_pb2.SearchWorkspaceMessagesRequest(
                workspace_id=WORKSPACE, query=rng.choice(QUERIES), perspective_peer_id=perspective
            )
        )

    def search_workspace(api: Client, rng):
        return api.workspaces.SearchMessages(
            workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id=WORKSPACE, query=rng.choice(QUERIES))
        )

    def search_perspective(api: Client, rng):
        return search_as(rng.choice(p["peers"]), api, rng)

    def search_session(api: Client, rng):
        return api.sessions.SearchMessages(
            sessions_pb2.SearchSessionMessagesRequest(
                workspace_id=WORKSPACE, session_id=rng.choice(session_ids), query=rng.choice(QUERIES)
            )
        )

    def search_session_after_write(api: Client, rng):
        return api.sessions.SearchMessages(
            sessions_pb2.SearchSessionMessagesRequest(
                workspace_id=WORKSPACE,
                session_id=rng.choice(session_ids),
                query=rng.choice(QUERIES),
                consistency=common_pb2.ReadConsistency(consistency_token=token),
            )
        )

    def search_peer(api: Client, rng):
        return api.peers.SearchMessages(
            peers_pb2.SearchPeerMessagesRequest(
                workspace_id=WORKSPACE, peer_id=rng.choice(p["peers"]), query=rng.choice(QUERIES)
            )
        )

    newcomer = p["newcomer"]["sessions"]

    def get_context_newcomer(api: Client, rng):
        s = rng.choice(NEWCOMER_SESSIONS)
        return context_of(s, NEWCOMER, rng.choice(newcomer[s][1:]), api, rng)

    def search_newcomer(api: Client, rng):
        return search_as(NEWCOMER, api, rng)

    def get_context_long(api: Client, rng):
        return context_of(LONG_SESSION, *p["long"]["sessions"][LONG_SESSION], api, rng)

    return {
        "GetContext": get_context,
        "GetContext newcomer": get_context_newcomer,
        "GetContext long session": get_context_long,
        "SearchMessages newcomer perspective": search_newcomer,
        "SearchMessages workspace": search_workspace,
        "SearchMessages workspace+perspective": search_perspective,
        "SearchMessages session": search_session,
        "SearchMessages session after a write": search_session_after_write,
        "SearchMessages peer": search_peer,
    }


async def measure(
    state, call, clients: int, warmup: float, seconds: float, rate: float = 0.0, meter: CpuMeter | None = None
) -> dict:
    """Closed loop (rate 0: each client calls again as soon as it has an answer) or paced (`rate` calls/s
    offered in total, spread evenly over the clients; a late call is sent at once, never skipped)."""
    latencies: list[float] = []
    errors: list[str] = []
    start = time.monotonic()
    measure_from, stop_at = start + warmup, start + warmup + seconds

    async def client(i: int) -> None:
        rng = random.Random(i)
        interval = clients / rate if rate else 0.0
        due = start + interval * i / clients
        # its own TCP connection, like a separate client (channels in one process share one by default)
        async with aio_channel(
            f"127.0.0.1:{state.api_port}", state.admin_token(), options=[("grpc.use_local_subchannel_pool", 1)]
        ) as ch:
            api = Client(ch)  # the stubs once per connection, outside the timed calls
            while True:
                if interval:
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                    due += interval
                if (now := time.monotonic()) >= stop_at:
                    break
                try:
                    await call(api, rng)
                except grpc.aio.AioRpcError as exc:
                    errors.append(f"{exc.code().name}: {exc.details()}")
                    continue
                done = time.monotonic()
                if now >= measure_from:
                    latencies.append((done - now) * 1000)

    if meter is not None:
        asyncio.get_running_loop().call_later(warmup, meter.start)
    await asyncio.gather(*(client(i) for i in range(clients)))
    cpu = meter.stop() if meter is not None else {}
    per_call = {
        name: round(cores * seconds * 1000 / max(1, len(latencies)), 2)
        for name, cores in cpu.items()
        if name in ("api", "postgres", "bench_clients")
    }
    return {
        "calls": len(latencies),
        "cpu_cores": cpu,
        "cpu_ms_per_call": per_call,
        "calls_per_s": round(len(latencies) / seconds, 1),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "latency_ms": {
            "p50": pct(latencies, 50),
            "p95": pct(latencies, 95),
            "p99": pct(latencies, 99),
            "max": pct(latencies, 100),
        },
    }


def explain(dsn: str) -> dict:
    """EXPLAIN ANALYZE of the search statement, unfiltered and with a perspective, for the record."""
    import re

    from sqlalchemy.dialects import postgresql

    from projections.message_ranking import depth
    from projections.message_search import fused
    from projections.search_shape import MessageSearch, Shape, params

    vector = LocalOnnxEmbedder().embed_sync([QUERIES[0]])[0]
    plans = {}
    with psycopg.connect(dsn) as conn:
        conn.execute("SET search_path TO peerlog, public")
        conn.execute(f"SET hnsw.iterative_scan = relaxed_order; SET hnsw.ef_search = {depth(10)}")
        for name, search in (
            ("workspace", MessageSearch(WORKSPACE, QUERIES[0], vector)),
            ("perspective", MessageSearch(WORKSPACE, QUERIES[0], vector, perspective_id="p3")),
            ("peer", MessageSearch(WORKSPACE, QUERIES[0], vector, author_ids=["p3"])),
        ):
            values = params(search)
            compiled = (
                fused(Shape.of(search))
                .params(values)
                .compile(dialect=postgresql.dialect(), compile_kwargs={"render_postcompile": True})
            )
            bound = {k: (str(v) if k == "vector" else v) for k, v in compiled.params.items()}
            sql = str(compiled).replace("%(vector)s", "%(vector)s::vector")
            rows = conn.execute(f"EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) {sql}", bound).fetchall()
            plans[name] = [re.sub(r"'\[[-0-9.e,]+\]'", "'[query vector]'", r[0]) for r in rows]
    return plans


async def write_token(state) -> str:
    """The consistency token of a write (a session of its own, new at each run: a repeated create writes
    nothing), for the phase whose reads carry one."""
    async with aio_channel(f"127.0.0.1:{state.api_port}", state.admin_token()) as ch:
        made = await Client(ch).session(WORKSPACE, f"bench-token-{time.time_ns()}")
    return made.consistency_token


def chosen(name: str, only: str, phases) -> bool:
    """Whether `--only` asks for phase `name`: every phase without it, the phase of that name if there is
    one, else the phases whose name starts with it."""
    if not only:
        return True
    return name == only if only in phases else name.startswith(only)


async def load(state, p: dict, args) -> dict:
    out = {}
    token = await write_token(state)
    for rate in (0.0, args.paced_rate):
        mode = f"paced {rate:g}/s" if rate else "closed loop"
        phases = calls(p, token)
        for name, call in phases.items():
            if not chosen(name, args.only, phases):
                continue
            log(
                f"measuring {name} ({mode}): {args.clients} clients, {args.seconds:g} s after {args.warmup:g} s warm-up"
            )
            busy = idle_check(1.0)
            meter = CpuMeter(
                {**stack_pids(Path(state.root), state), "bench_clients": [os.getpid()]},
                with_children={"postgres", "api"},
            )  # api: with PEERLOG_API_PROCESSES > 1
            out.setdefault(mode, {})[name] = {
                **await measure(state, call, args.clients, args.warmup, args.seconds, rate, meter),
                "machine_busy_pct_before": busy,
                "load_average_after": os.getloadavg(),
            }
            log(f"  {out[mode][name]}")
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--observations", type=int, default=100_000)
    ap.add_argument("--peers", type=int, default=40)
    ap.add_argument("--distinct", type=int, default=25_000, help="distinct texts per kind (messages, observations)")
    ap.add_argument("--per-session", type=int, default=100, help="messages per session")
    ap.add_argument("--long-messages", type=int, default=2_000, help="messages of the long session")
    ap.add_argument(
        "--crowd",
        type=int,
        default=0,
        help="peers of the workspace that take part in nothing (a kept stack keeps them)",
    )
    ap.add_argument("--pairs", type=int, default=100, help="(observer, observed) pairs holding the observations")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument(
        "--paced-rate",
        type=float,
        default=40.0,
        help="calls/s offered in total in the second, paced pass (the first is closed loop)",
    )
    ap.add_argument(
        "--only", default="", help="measure only the phase of this name, else the phases whose name starts with this"
    )
    ap.add_argument("--dir", type=Path, help="stack directory (default: a fresh temp dir)")
    ap.add_argument("--keep", action="store_true", help="leave the stack running and its directory in place")
    ap.add_argument("--out", type=Path, default=ROOT / "tests/bench/results/read.json")
    return ap.parse_args(argv)


@contextmanager
def bench_stack(args, prefix: str, keep: list[str], progress=log) -> Iterator[stack.StackState]:
    """The dev stack in --dir (or a fresh temp dir) with only the `keep` processes running. Stopped
    afterwards unless --keep; a temp dir is removed once the bench has succeeded."""
    root = (args.dir or Path(tempfile.mkdtemp(prefix=prefix))).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "stack.json").exists():
        pin_fresh_ports(root)
    state = stack.up(root, progress=progress)
    try:
        stop_others(state, keep=keep)
        yield state
    except BaseException:
        if not args.keep:
            stack.down(root, progress=progress)
        raise
    if not args.keep:
        stack.down(root, progress=progress)
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


def emit(result: dict, out: Path) -> None:
    """The bench's JSON on stdout and in `out`."""
    text = json.dumps(result, indent=2)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    with bench_stack(args, "peerlog-read-bench-", keep=["api", "projector"]) as state:
        log(f"building {args.messages} messages and {args.observations} observations through the log")
        built = build(state, args)
        built["timings"]["crowd_appended"] = add_crowd(state, args.crowd)
        setup_s = round(time.monotonic() - started, 1)
        log(f"setup took {setup_s} s: {built['timings']}")
        measured = asyncio.run(load(state, built["plan"], args))
        plans = explain(sql_dsn(state.database_url))
        result = {
            "benchmark": "read",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": shlex.join([".venv/bin/python", str(Path(__file__).relative_to(ROOT)), *argv]),
            "machine": machine(),
            "api_processes": int(os.environ.get("PEERLOG_API_PROCESSES", "1")),
            "workspace": {
                "messages": args.messages,
                "observations": args.observations,
                "peers": args.peers,
                "distinct_texts_per_kind": args.distinct,
                "sessions": len(built["plan"]["sessions"]),
                "pairs": args.pairs,
                "crowd_peers": args.crowd,
                "events_appended": built["events_appended"],
            },
            "setup": {"total_s": setup_s, **built["timings"]},
            "clients": args.clients,
            "seconds_per_phase": args.seconds,
            "targets_p95_ms": TARGETS_MS,
            "phases": measured,
            "met_p95_target": {
                f"{mode}: {name}": r["latency_ms"]["p95"] is not None
                and r["latency_ms"]["p95"] <= TARGETS_MS[name.split()[0]]
                for mode, phases in measured.items()
                for name, r in phases.items()
            },
            "plans": plans,
        }
        emit(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
