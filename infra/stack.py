"""The local dev stack: Kafka, Postgres, topics, projector and API server, as background processes.

State (ports, pids, data) lives in one directory (default `.peerlog/dev`), so `dev up` after
`dev down` brings back the same data on the same ports.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from infra.kafka.broker import KafkaBroker, running_broker, stop_broker
from infra.postgres.embedded import EmbeddedPostgres
from infra.processes import pid_alive, preferred_or_free_port, terminate
from services.bus.admin import create_topics
from services.bus.settings import KafkaSettings

# the long-running peerlog processes of the stack: name -> CLI arguments
PROCESSES: dict[str, list[str]] = {
    "projector": ["projector", "run"],
    "worker": ["worker"],
    "api": ["serve"],
    "webhooks": ["webhooks"],  # delivers WebhookService's webhooks; exactly one
}


def sql_dsn(url: str) -> str:
    """A SQLAlchemy database URL (`postgresql+psycopg://…`) as psycopg.connect and libpq take it."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@dataclass
class StackState:
    root: str
    kafka_port: int = 0
    postgres_port: int = 0
    api_port: int = 0
    database_url: str = ""
    model_env: dict[str, str] = field(default_factory=dict)  # PEERLOG_LLM_* of the model the stack uses
    pids: dict[str, int] = field(default_factory=dict)
    auth_secret: str = ""  # the API's HS256 key, made on the first `up` and kept, so tokens outlive restarts

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def admin_token(self) -> str:
        """A token for every call to this stack's API (no expiry: the stack is local)."""
        from services.api.settings import AuthSettings
        from services.api.tokens import mint

        return mint(AuthSettings(secret=self.auth_secret), ["admin"])

    def env(self) -> dict[str, str]:
        """The PEERLOG_* settings a process needs to join this stack (PEERLOG_AUTH_TOKEN: as admin)."""
        return {
            "PEERLOG_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap_servers,
            "PEERLOG_DATABASE_URL": self.database_url,
            "PEERLOG_API_PORT": str(self.api_port),
            "PEERLOG_AUTH_SECRET": self.auth_secret,
            "PEERLOG_AUTH_TOKEN": self.admin_token(),
            **self.model_env,
        }


def _state_file(root: Path) -> Path:
    return root / "stack.json"


def load_state(root: Path) -> StackState:
    path = _state_file(root)
    if path.exists():
        return StackState(**json.loads(path.read_text()))
    return StackState(root=str(root))


def _save(state: StackState) -> None:
    # it holds the HS256 secret that mints admin tokens: readable by its owner only, from the first byte
    fd = os.open(_state_file(Path(state.root)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also a file an earlier version wrote world-readable
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(asdict(state), indent=2))


def ours(pid: int, name: str) -> bool:
    """Whether `pid` is alive and still the stack's `name` process: after a reboot, or once a process died, its
    recorded pid may be another program's, which `down` killed and `up` took for the process running."""
    if not pid_alive(pid):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return not Path("/proc").is_dir()  # no /proc (macOS): the pid alone
    return b"services.cli.main" in argv and all(arg.encode() in argv for arg in PROCESSES[name])


def _spawn(state: StackState, name: str) -> int:
    log = open(Path(state.root) / f"{name}.log", "ab")
    # a projector or worker restarted under its name takes its partitions back at once (static group
    # membership), and a worker's or API's first transaction aborts what its dead predecessor left open
    own = {f"PEERLOG_{name.upper()}_INSTANCE_ID": name} if name in ("projector", "worker", "api") else {}
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", *PROCESSES[name]],
        env={**own, **os.environ, **state.env()},
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # outlives `dev up`
    )
    return proc.pid


def wait_for_api(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"API on port {port} not healthy after {timeout:.0f} s")
            time.sleep(0.2)


def up(root: Path, progress=print, model_env: dict[str, str] | None = None) -> StackState:
    """Start whatever part of the stack is not running; return its state.

    `model_env` (PEERLOG_LLM_* settings) points the worker at a model server; without it the
    worker uses whatever the environment says.
    """
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    state = load_state(root)
    if model_env is not None:
        state.model_env = model_env
    state.kafka_port = state.kafka_port or preferred_or_free_port(9092)
    state.postgres_port = state.postgres_port or preferred_or_free_port(54329)
    state.api_port = state.api_port or preferred_or_free_port(50051)
    state.auth_secret = state.auth_secret or secrets.token_hex(32)
    if running_broker(root / "kafka"):
        progress(f"kafka     already running on 127.0.0.1:{state.kafka_port}")
    else:
        progress(f"kafka     starting on 127.0.0.1:{state.kafka_port}")
        KafkaBroker(root / "kafka", port=state.kafka_port).start()
    progress(f"postgres  starting on 127.0.0.1:{state.postgres_port}")
    pg = EmbeddedPostgres(root / "postgres", port=state.postgres_port)
    pg.start()
    state.database_url = pg.url
    created = create_topics(KafkaSettings(bootstrap_servers=state.bootstrap_servers))
    progress(f"topics    {', '.join(f'{t} ({s})' for t, s in created.items())}")
    for name in PROCESSES:
        if not ours(state.pids.get(name, 0), name):
            state.pids[name] = _spawn(state, name)
            progress(f"{name:<9} started (pid {state.pids[name]}, log {root / (name + '.log')})")
    _save(state)
    wait_for_api(state.api_port)
    progress(f"api       serving on 127.0.0.1:{state.api_port}")
    return state


def down(root: Path, progress=print) -> None:
    """Stop every part of the stack; data stays for the next `up`."""
    root = root.resolve()
    state = load_state(root)
    for name, pid in state.pids.items():
        if ours(pid, name):
            terminate(pid, 30)
            progress(f"{name:<9} stopped")
    state.pids = {}
    stop_broker(root / "kafka")
    progress("kafka     stopped")
    if (root / "postgres").exists():
        EmbeddedPostgres(root / "postgres", port=state.postgres_port or 1).stop()
        progress("postgres  stopped")
    if root.exists():
        _save(state)
