"""The long fuzz of every RPC (issue 17 §4) on a local stack this script starts and stops.

    .venv/bin/python tests/bench/fuzz.py [REQUESTS (default 10000)] [--seed N] [--out tests/bench/results/fuzz.json]

Starts Kafka, Postgres, the projector, a worker (router, embedder), the webhook deliverer and the API as
separate processes (infra.stack), Chat pointed at the deterministic test model server and webhooks at a
receiver on loopback (nothing is posted off the machine), then sends REQUESTS fuzzed requests
spread evenly over every RPC (tests/fuzz) and prints the JSON result: requests per RPC, outcomes by
status code, latency, input classes tried, and every violation of the oracle with examples. The
refused-write check watches the topics only the API writes (the worker's router and embedder append to
`perceived` and `message-embeddings` on their own schedule). Exit status 1 when there are violations.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "gen")]

from infra.processes import pid_alive  # noqa: E402
from infra.stack import down, up  # noqa: E402
from projections.db import sync_engine  # noqa: E402
from projections.settings import DatabaseSettings  # noqa: E402
from services.bus.settings import KafkaSettings  # noqa: E402
from services.bus.topics import ALL_TOPICS, MESSAGE_EMBEDDINGS, PERCEIVED  # noqa: E402
from tests.fuzz.harness import Fuzzer  # noqa: E402
from tests.support.model_server import ModelServer  # noqa: E402
from tests.support.webhook_receiver import Receiver  # noqa: E402

WORKER_WRITES = {PERCEIVED.name, MESSAGE_EMBEDDINGS.name}


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def fuzz(root: Path, requests: int, seed: int, model_url: str, hook: Receiver) -> dict:
    env = {
        "PEERLOG_WEBHOOK_ALLOW_PRIVATE_TARGETS": "true",  # the fuzz's webhooks POST to its own receiver
        "PEERLOG_WORKER_PROCESSORS": "router,embedder",
        "PEERLOG_LLM_BASE_URL": model_url,
        "PEERLOG_LLM_MODEL": "test-model",
        "PEERLOG_LLM_TIMEOUT_S": "5",
        "PEERLOG_LLM_MAX_RETRIES": "0",
    }
    state = up(root, progress=log, model_env=env)
    try:
        kafka = KafkaSettings(bootstrap_servers=state.bootstrap_servers)
        database = DatabaseSettings(url=state.database_url)
        topics = [s.full_name(kafka.topic_prefix) for s in ALL_TOPICS if s.name not in WORKER_WRITES]

        def dead() -> str | None:
            gone = [name for name, pid in state.pids.items() if not pid_alive(pid)]
            return f"process exited: {', '.join(gone)}" if gone else None

        engine = sync_engine(database)
        fuzzer = Fuzzer(
            f"127.0.0.1:{state.api_port}",
            hook.url,
            state.bootstrap_servers,
            kafka.topic_prefix,
            topics,
            engine,
            database.schema_name,
            alive=dead,
            progress=log,
            token=state.admin_token(),
        )
        try:
            fuzzer.seed()
            return {**fuzzer.run(requests, seed=seed), "webhook_posts_received": len(hook.received)}
        finally:
            fuzzer.close()
            engine.dispose()
    finally:
        down(root, progress=log)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("requests", type=int, nargs="?", default=10_000)
    p.add_argument("--seed", type=int, default=17)
    p.add_argument("--out", type=Path, default=ROOT / "tests/bench/results/fuzz.json")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="peerlog-fuzz-"))
    with ModelServer() as model, Receiver() as hook:
        result = fuzz(root, args.requests, args.seed, model.base_url, hook)
    result = {
        "benchmark": "fuzz",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "seed": args.seed,
        **result,
    }
    text = json.dumps(result, indent=2, default=str)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    return 1 if result["violations"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
