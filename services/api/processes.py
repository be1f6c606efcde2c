"""`peerlog serve` with PEERLOG_API_PROCESSES > 1: several server processes on one port.

One Python process serves at most about one core (the GIL), and a read such as GetContext spends most
of its time in Python. The server processes bind the same port with SO_REUSEPORT, so the kernel spreads
incoming connections over them; each has its own pools, embedder and log producer. The process that
starts them serves no calls: it supervises and serves the metrics. SIGTERM stops them all, and when one
dies the others are stopped too and it exits with status 1, so whatever runs `peerlog serve` sees the
failure and can restart it instead of serving at part capacity unnoticed. If the supervisor itself dies,
even by SIGKILL, the kernel sends its children SIGTERM (PDEATHSIG).

Metrics: each server process counts in its own memory-mapped files in one directory (prometheus_client's
multiprocess mode, chosen when a process first imports it, hence set in the environment before the
children start), and the supervisor's endpoint sums them, so a scrape sees the calls of every process.
The supervisor records nothing itself (it imported prometheus_client before knowing the mode). The API
declares only counters and histograms, which sum as they are; a gauge added to it needs a
`multiprocess_mode`.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import secrets
import shutil
import signal
import sys
import tempfile
from collections.abc import Coroutine
from typing import Any

import uvloop
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from pydantic import SecretStr
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from services import collector, logs
from services.api.server import create_schemas, serve, serve_metrics, tls_credentials, verifier
from services.settings import Settings

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(parent: int) -> None:
    """Ask the kernel for SIGTERM when the supervisor dies, even by SIGKILL: no orphan keeps the port."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # it died before the request took effect
        raise SystemExit("the supervising API process is gone")


def _child(parent: int, number: int) -> None:
    _die_with_parent(parent)
    logs.configure()
    collector.tune()
    settings = Settings()  # the environment is inherited: the same settings
    if settings.api.instance_id:  # each process its own, the same after a restart
        api = settings.api.model_copy(update={"instance_id": f"{settings.api.instance_id}.{number}"})
        settings = settings.model_copy(update={"api": api})
    try:
        run_loop(serve(settings, metrics=False, advise=number == 0), settings)
    except ValueError as err:  # what the supervisor could not check before (a taken port): one line, not a traceback
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def run_loop(main: Coroutine[Any, Any, None], settings: Settings) -> None:
    """Run the server on the configured event loop."""
    factory = uvloop.new_event_loop if settings.api.event_loop == "uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


def _stop_on_signals() -> list[int]:
    """SIGTERM and SIGINT end supervision: the list gets the signal number, and the children are stopped."""
    received: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _frame: received.append(number))
    return received


def _supervise(children: list, received: list[int]) -> bool:
    """Wait for a stop signal or a dead child; True when a child died (the server failed)."""
    while not received:
        multiprocessing.connection.wait([c.sentinel for c in children], timeout=0.5)
        dead = [c for c in children if not c.is_alive()]
        if dead and not received:
            log.error("API process %d exited with %s; stopping the others", dead[0].pid, dead[0].exitcode)
            return True
    return False


def _serve_summed_metrics(settings: Settings) -> str:
    """A fresh directory for the children's metric files, and this process's endpoint summing them. Set
    before any child starts: a child picks its mode when it imports prometheus_client."""
    directory = tempfile.mkdtemp(prefix="peerlog-api-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    if settings.api.metrics_port:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)
        serve_metrics(settings.api, registry)
    return directory


def _shared_cursor_key(settings: Settings) -> Settings:
    """Settings whose page-token key every process shares: a connection may reach any of them, so a
    token one process issued must pass in the others. The children read it from the environment."""
    if settings.api.cursor_key.get_secret_value():
        return settings
    key = secrets.token_hex(32)
    os.environ["PEERLOG_API_CURSOR_KEY"] = key
    return settings.model_copy(update={"api": settings.api.model_copy(update={"cursor_key": SecretStr(key)})})


DRIVER = "postgresql+psycopg"  # projections.db's engines, sync and asyncio, both talk psycopg 3


def _check_database_url(url: str) -> None:
    try:
        driver = make_url(url).drivername
    except ArgumentError:
        driver = None  # the message must not repeat the URL: it may hold a password
    if driver != DRIVER:
        said = f"starts with {driver}://" if driver else "is no database URL"
        raise ValueError(
            f"PEERLOG_DATABASE_URL {said}; peerlog reaches Postgres through psycopg 3: "
            f"{DRIVER}://user:password@host:5432/database"
        )


def check(settings: Settings) -> None:
    """Refuse, before anything starts, what would fail in every server process (ValueError saying what to
    set): the database URL's driver, the token key, the TLS files. A child's traceback would say it once per
    process, after the supervisor had already started."""
    _check_database_url(settings.database.url)
    if settings.auth.enabled:
        verifier(settings.auth)
    tls_credentials(settings.api)


def run(settings: Settings) -> None:
    """Serve with `settings.api.processes` processes until SIGTERM/SIGINT."""
    check(settings)
    if settings.api.processes == 1:
        run_loop(serve(settings), settings)
        return
    if settings.api.port == 0:
        raise ValueError("PEERLOG_API_PROCESSES > 1 needs a fixed PEERLOG_API_PORT (0 would give each its own)")
    settings = _shared_cursor_key(settings)
    create_schemas(settings)
    metrics_dir = _serve_summed_metrics(settings)
    spawn = multiprocessing.get_context("spawn")  # no forked gRPC or event-loop state
    children = [
        spawn.Process(target=_child, args=(os.getpid(), i), name=f"peerlog-api-{i}")
        for i in range(settings.api.processes)
    ]
    received = _stop_on_signals()  # before the first start: a SIGTERM while they start stops them too
    try:
        for child in children:
            child.start()
        failed = _supervise(children, received)
    finally:
        _stop(children)
        shutil.rmtree(metrics_dir, ignore_errors=True)
    if failed:
        raise SystemExit(1)


def _stop(children: list) -> None:
    for child in children:
        if child.is_alive():
            child.terminate()  # SIGTERM: each drains its calls
    for child in children:
        if child.pid is None:
            continue  # a SIGTERM came before it started
        child.join(10)
        if child.is_alive():
            child.kill()
