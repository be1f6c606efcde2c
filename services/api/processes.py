"""`peerlog serve` with PEERLOG_API_PROCESSES > 1: several server processes on one port.

One Python process serves at most about one core (the GIL), and a read such as GetContext spends most
of its time in Python. The processes bind the same port with SO_REUSEPORT, so the kernel spreads
incoming connections over them; each has its own pools, embedder and log producer. The first process
supervises: SIGTERM stops them all, and when one dies the others are stopped too, so whatever runs
`peerlog serve` sees the failure and can restart it instead of serving at part capacity unnoticed.
If the supervisor itself dies, even by SIGKILL, the kernel sends its children SIGTERM (PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import secrets
import signal

from pydantic import SecretStr

from services import logs
from services.api.server import serve
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


def _child(parent: int) -> None:
    _die_with_parent(parent)
    logs.configure()
    asyncio.run(serve(Settings(), metrics=False))  # the environment is inherited: the same settings


async def _supervise(settings: Settings, children: list) -> None:
    server = asyncio.ensure_future(serve(settings))
    while not server.done():
        dead = [c for c in children if not c.is_alive()]
        if dead:
            log.error("API process %d exited with %s; stopping the others", dead[0].pid, dead[0].exitcode)
            signal.raise_signal(signal.SIGTERM)  # our own server drains and stops
            break
        await asyncio.sleep(0.5)
    await server


def _shared_cursor_key(settings: Settings) -> Settings:
    """Settings whose page-token key every process shares: a connection may reach any of them, so a
    token one process issued must pass in the others. The children read it from the environment."""
    if settings.api.cursor_key.get_secret_value():
        return settings
    key = secrets.token_hex(32)
    os.environ["PEERLOG_API_CURSOR_KEY"] = key
    return settings.model_copy(update={"api": settings.api.model_copy(update={"cursor_key": SecretStr(key)})})


def run(settings: Settings) -> None:
    """Serve with `settings.api.processes` processes until SIGTERM/SIGINT."""
    if settings.api.processes == 1:
        asyncio.run(serve(settings))
        return
    if settings.api.port == 0:
        raise ValueError("PEERLOG_API_PROCESSES > 1 needs a fixed PEERLOG_API_PORT (0 would give each its own)")
    settings = _shared_cursor_key(settings)
    spawn = multiprocessing.get_context("spawn")  # no forked gRPC or event-loop state
    children = [spawn.Process(target=_child, args=(os.getpid(),), name=f"peerlog-api-{i}")
                for i in range(1, settings.api.processes)]
    for child in children:
        child.start()
    try:
        asyncio.run(_supervise(settings, children))
    finally:
        for child in children:
            if child.is_alive():
                child.terminate()  # SIGTERM: it drains its calls like the first one
        for child in children:
            child.join(10)
            if child.is_alive():
                child.kill()
