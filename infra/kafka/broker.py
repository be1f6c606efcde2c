"""Run a real single-node Apache Kafka broker (KRaft, loopback only) from Maven jars.

Used by the dev loop (``python -m infra.kafka start|stop``) and by tests that need a real
broker: idempotent/transactional producers, read_committed consumers, compacted topics and
state changelogs all behave as in production, which in-memory stand-ins do not.

Layout of ``data_dir`` (everything the broker writes lives there; owner-only, since the topic data is
every workspace's conversations):

- ``server.properties``  rendered on every start from the ports held by the object
- ``kraft/``             Kafka ``log.dirs`` (topic data and the KRaft metadata log)
- ``broker.log``         the JVM's stdout/stderr (startup crashes show up here)
- ``server.log``         Kafka's own log4j2 log (see ``log4j2.xml``)
- ``broker.pid``         pid of the running JVM, used by ``stop_broker``

Only the standard library and confluent_kafka are used.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import secrets
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka.admin import AdminClient

from infra.processes import HOST, free_port, log_tail, pid_alive, read_pid_file, terminate

KAFKA_VERSION = "4.4.0"  # keep in sync with <kafka.version> in pom.xml
INFRA_DIR = Path(__file__).resolve().parent
REPO_ROOT = INFRA_DIR.parents[1]
POM = INFRA_DIR / "pom.xml"
LOG4J2_CONFIG = INFRA_DIR / "log4j2.xml"
LIB_DIR_ENV = "PEERLOG_KAFKA_LIB_DIR"
JARS_MARKER = ".complete"
BROKER_ACCOUNT = "broker"  # with sasl_users: the broker's own SASL account (inter-broker, readiness probe)


class BrokerStartError(RuntimeError):
    """The broker process died or did not become ready in time."""


# --------------------------------------------------------------------------- jars


def default_lib_dir() -> Path:
    """Return the jar cache dir: $PEERLOG_KAFKA_LIB_DIR or <repo>/.cache/kafka/<version>/lib."""
    override = os.environ.get(LIB_DIR_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return REPO_ROOT / ".cache" / "kafka" / KAFKA_VERSION / "lib"


def _pom_digest() -> str:
    """Return a hash of pom.xml, so editing the POM invalidates an existing jar cache."""
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def _jars_complete(lib_dir: Path) -> bool:
    """Tell whether lib_dir holds a finished copy made from the current pom.xml."""
    marker = lib_dir / JARS_MARKER
    return marker.is_file() and marker.read_text().strip() == _pom_digest()


def _ignore_default_cache() -> None:
    """Make <repo>/.cache/kafka ignore itself, so the jars never show up in git status."""
    cache_root = REPO_ROOT / ".cache" / "kafka"
    cache_root.mkdir(parents=True, exist_ok=True)
    ignore = cache_root / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")


def _copy_jars(lib_dir: Path) -> None:
    """Run Maven's copy-dependencies into a clean lib_dir; raise with Maven's output on failure."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("mvn not found on PATH; it is needed once to fetch the Kafka jars")
    # A half-finished earlier copy may hold jars of another version: start clean.
    shutil.rmtree(lib_dir, ignore_errors=True)
    lib_dir.mkdir(parents=True)
    cmd = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={lib_dir}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")


def ensure_jars(lib_dir: Path | None = None) -> Path:
    """Copy the broker's jars into lib_dir once (Maven), and return lib_dir.

    Skips Maven when the marker file says an earlier copy from the same pom.xml completed.
    """
    lib_dir = Path(lib_dir).resolve() if lib_dir else default_lib_dir()
    if _jars_complete(lib_dir):
        return lib_dir
    if lib_dir == REPO_ROOT / ".cache" / "kafka" / KAFKA_VERSION / "lib":
        _ignore_default_cache()
    lib_dir.parent.mkdir(parents=True, exist_ok=True)
    # Several test processes may start at once; only one should run Maven.
    with open(lib_dir.parent / f".{lib_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _jars_complete(lib_dir):
            _copy_jars(lib_dir)
            (lib_dir / JARS_MARKER).write_text(_pom_digest() + "\n")
    return lib_dir


# --------------------------------------------------------------------------- config


def new_cluster_id() -> str:
    """Return a KRaft cluster id: 16 random bytes as unpadded URL-safe base64 (22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def render_server_properties(
    log_dir: Path, port: int, controller_port: int, overrides: Mapping[str, str] | None = None
) -> str:
    """Return server.properties for a combined broker+controller node on 127.0.0.1.

    overrides replace or add settings (e.g. a test that needs a shorter broker.session.timeout.ms).
    """
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        # Static voter set: no --standalone at format time, and a changed port is harmless.
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        # peerlog creates every topic itself, with explicit partitions and configs;
        # a typo'd topic name must fail instead of silently creating a topic.
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        # One node: every internal topic must be satisfiable with a single replica.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # Without this a consumer group waits 3 s before its first assignment.
        "group.initial.rebalance.delay.ms": "0",
        # Small footprint on a 2-core machine.
        "num.network.threads": "2",
        "num.io.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "background.threads": "2",
        "log.cleaner.threads": "1",
        # The default 128 MiB dedupe buffer is the largest single heap user.
        "log.cleaner.dedupe.buffer.size": "33554432",
        # Check for compactable logs every second instead of every 15 s, so compaction
        # (projection snapshots, state changelogs) is observable in a dev loop or a test.
        "log.cleaner.backoff.ms": "1000",
    }
    settings.update(overrides or {})
    return "".join(f"{key}={value}\n" for key, value in settings.items())


# --------------------------------------------------------------------------- processes


def _is_our_broker(pid: int, config: Path) -> bool:
    """Tell whether pid is a kafka.Kafka JVM running with this config (guards against pid reuse)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"kafka.Kafka" in args and str(config).encode() in args


def _error_lines(path: Path, lines: int = 15) -> str:
    """Return the last ERROR/FATAL and exception lines of a Kafka log (the cause, minus stack frames)."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    hits = [
        line
        for line in text
        if " ERROR " in line
        or " FATAL " in line
        or line.startswith("Caused by:")
        or (line[:1].isalpha() and ("Exception: " in line or "Error: " in line))
    ]
    return "\n".join(hits[-lines:])


def _port_open(port: int) -> bool:
    """Tell whether something accepts TCP connections on 127.0.0.1:port."""
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _running_pid(data_dir: Path) -> int | None:
    """Return the pid from data_dir/broker.pid if that process is our live broker, else None."""
    pid = read_pid_file(data_dir / "broker.pid")
    if pid is not None and pid_alive(pid) and _is_our_broker(pid, data_dir / "server.properties"):
        return pid
    return None


def running_broker(data_dir: Path) -> dict | None:
    """Describe the broker already running on data_dir ({"bootstrap_servers", "pid"}), or None.

    Lets `python -m infra.kafka start` be idempotent for a dev loop.
    """
    data_dir = Path(data_dir).resolve()
    pid = _running_pid(data_dir)
    if pid is None:
        return None
    for line in (data_dir / "server.properties").read_text().splitlines():
        if line.startswith("advertised.listeners="):
            return {"bootstrap_servers": line.split("//", 1)[1], "pid": pid}
    return None


def stop_broker(data_dir: Path, timeout: float = 30) -> bool:
    """Stop the broker whose pid is in data_dir/broker.pid; True if one was running.

    For brokers started by another process (e.g. ``python -m infra.kafka start``).
    """
    data_dir = Path(data_dir).resolve()
    pid = _running_pid(data_dir)
    if pid is not None:
        terminate(pid, timeout)
    (data_dir / "broker.pid").unlink(missing_ok=True)
    return pid is not None


# --------------------------------------------------------------------------- broker


class KafkaBroker:
    """One single-node KRaft Kafka broker on 127.0.0.1, its data kept in data_dir.

    Ports given as 0 are picked once, in __init__, and reused by every start/restart,
    so clients' bootstrap_servers stays valid across restarts. A node of a cluster
    (infra.kafka.cluster) passes the cluster's id and its voter set in properties.
    With sasl_users ({name: password}) the client listener is SASL_PLAINTEXT with the PLAIN mechanism and
    takes only those accounts, for tests of clients that authenticate.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        controller_port: int = 0,
        heap: str = "768m",
        lib_dir: Path | None = None,
        properties: Mapping[str, str] | None = None,
        cluster_id: str | None = None,
        sasl_users: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port or free_port()
        self.controller_port = controller_port or free_port(avoid={self.port})
        self.heap = heap
        self.lib_dir = lib_dir
        self.properties = dict(properties or {})
        self.cluster_id = cluster_id  # the nodes of one cluster share it; None: a fresh one at format time
        self.sasl_users = dict(sasl_users or {})
        self._own_password = secrets.token_urlsafe(16)
        self._proc: subprocess.Popen | None = None

    # -- paths and properties

    @property
    def bootstrap_servers(self) -> str:
        """Return the client bootstrap address, "127.0.0.1:PORT"."""
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Return the JVM's pid while this object's broker runs, else None."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    @property
    def config_path(self) -> Path:
        """Return the path of the rendered server.properties."""
        return self.data_dir / "server.properties"

    @property
    def log_dir(self) -> Path:
        """Return Kafka's log.dirs (topic data and KRaft metadata)."""
        return self.data_dir / "kraft"

    @property
    def pid_file(self) -> Path:
        """Return the file that holds the running JVM's pid."""
        return self.data_dir / "broker.pid"

    @property
    def broker_log(self) -> Path:
        """Return the file that receives the JVM's stdout and stderr."""
        return self.data_dir / "broker.log"

    # -- lifecycle

    def start(self, timeout: float = 120) -> "KafkaBroker":
        """Start the broker (formatting data_dir on first use) and wait until it serves metadata."""
        if self.pid is not None:
            return self
        lib_dir = ensure_jars(self.lib_dir)
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        # also a directory an older version made 0755: any local user could read the segment files
        self.data_dir.chmod(0o700)
        self.config_path.write_text(
            render_server_properties(
                self.log_dir, self.port, self.controller_port, {**self._sasl_properties(), **self.properties}
            )
        )
        if not self._formatted():
            self._format(lib_dir)
        self._launch(lib_dir)
        self._wait_ready(timeout)
        return self

    def stop(self, timeout: float = 30) -> None:
        """Stop the broker: SIGTERM for a controlled shutdown, SIGKILL after timeout."""
        if self._proc is not None:
            terminate(self._proc.pid, timeout, self._proc)
            self._forget()

    def kill(self) -> None:
        """SIGKILL the broker at once (no controlled shutdown), for fault-injection tests."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._forget()

    def restart(self, timeout: float = 120) -> "KafkaBroker":
        """Stop and start again on the same data_dir and ports."""
        self.stop()
        return self.start(timeout)

    def __enter__(self) -> "KafkaBroker":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- internals

    def _sasl_properties(self) -> dict[str, str]:
        """The server.properties that make the client listener SASL_PLAINTEXT/PLAIN, if sasl_users is set."""
        if not self.sasl_users:
            return {}
        accounts = {BROKER_ACCOUNT: self._own_password, **self.sasl_users}
        users = " ".join(f'user_{name}="{password}"' for name, password in accounts.items())
        login = f'username="{BROKER_ACCOUNT}" password="{self._own_password}"'  # its own, inter-broker
        return {
            "listeners": f"SASL_PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
            "advertised.listeners": f"SASL_PLAINTEXT://{HOST}:{self.port}",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {login} {users};"
            ),
        }

    def _probe_config(self) -> dict[str, str]:
        """The client config of the readiness probe: the broker's own account when it asks for one."""
        config = {"bootstrap.servers": self.bootstrap_servers}
        if self.sasl_users:
            config |= {
                "security.protocol": "sasl_plaintext",
                "sasl.mechanism": "PLAIN",
                "sasl.username": BROKER_ACCOUNT,
                "sasl.password": self._own_password,
            }
        return config

    def _formatted(self) -> bool:
        """Tell whether the KRaft log dir was formatted (formatting again would fail)."""
        return (self.log_dir / "meta.properties").is_file()

    def _java(self, lib_dir: Path, heap: str) -> list[str]:
        """Return the java command prefix with the Kafka classpath and log config."""
        java = shutil.which("java") or "java"
        return [
            java,
            f"-Xmx{heap}",
            "-Xms64m",
            "-XX:+UseG1GC",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp",
            # The JVM expands the wildcard itself; no shell is involved.
            f"{lib_dir}/*",
        ]

    def _format(self, lib_dir: Path) -> None:
        """Format log_dir with a fresh cluster id (StorageTool)."""
        cmd = self._java(lib_dir, "256m") + [
            "kafka.tools.StorageTool",
            "format",
            # one token with "=": an id may start with "-", which argparse would take for an option
            f"--cluster-id={self.cluster_id or new_cluster_id()}",
            "-c",
            str(self.config_path),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise BrokerStartError(f"formatting {self.log_dir} failed:\n{done.stdout}\n{done.stderr}")

    def _launch(self, lib_dir: Path) -> None:
        """Start the JVM detached (own session), output appended to broker.log."""
        cmd = self._java(lib_dir, self.heap) + ["kafka.Kafka", str(self.config_path)]
        with open(self.broker_log, "ab") as out:
            # Own session: a Ctrl-C in the caller's terminal must not kill the broker
            # half-way, and `python -m infra.kafka start` may exit while it keeps running.
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{self._proc.pid}\n")

    def _wait_ready(self, timeout: float) -> None:
        """Wait for the broker port, then for a real metadata answer; fail fast if the JVM exits."""
        deadline = time.monotonic() + timeout
        # The broker listener opens only once the node is ready; the controller's opens earlier.
        while not _port_open(self.port):
            self._check_alive(deadline)
            time.sleep(0.2)
        admin = AdminClient(self._probe_config())
        while True:
            self._check_alive(deadline)
            try:
                admin.list_topics(timeout=5)
                return
            except Exception:  # KafkaException until metadata is served
                time.sleep(0.2)

    def _check_alive(self, deadline: float) -> None:
        """Raise BrokerStartError (with log tails) if the JVM died or time ran out."""
        assert self._proc is not None
        code = self._proc.poll()
        if code is None and time.monotonic() < deadline:
            return
        if code is None:
            self.kill()
            reason = "did not become ready in time"
        else:
            self._forget()
            reason = f"exited with code {code}"
        server_log = self.data_dir / "server.log"
        raise BrokerStartError(
            f"Kafka broker on {self.bootstrap_servers} {reason}.\n"
            f"--- errors in {server_log}\n{_error_lines(server_log)}\n"
            f"--- tail of {self.broker_log}\n{log_tail(self.broker_log)}\n"
            f"--- tail of {server_log}\n{log_tail(server_log, 20)}"
        )

    def _forget(self) -> None:
        """Drop the handle and pid file of a broker that is gone."""
        self._proc = None
        self.pid_file.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"KafkaBroker({self.bootstrap_servers}, data_dir={str(self.data_dir)!r}, pid={self.pid})"
