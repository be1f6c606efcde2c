"""Helpers the local infra shares: free ports, pid files, process liveness and log tails."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

HOST = "127.0.0.1"


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
UNASSIGNED_PORTS = 10_000  # how many ports below the ephemeral range free_port draws from


def _below_ephemeral_range() -> range:
    """Ports the kernel never picks itself, for a bind to port 0 or an outgoing connection: those below
    its ephemeral range."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    return range(max(1024, low - UNASSIGNED_PORTS), low)


def free_port(avoid: set[int] | frozenset[int] = frozenset()) -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, not one in `avoid`.

    Drawn at random below the kernel's ephemeral range, not picked by the kernel: between this call and
    the process that binds it, a server started on port 0 or an outgoing connection elsewhere could
    otherwise take the same port. A fresh-clone CI run (two pytest workers) scraped an API's metrics that
    held none of its calls, most likely because its port was taken that way (every in-process test
    server binds port 0).
    """
    ports = _below_ephemeral_range()
    while True:
        port = random.choice(ports)
        if port in avoid:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
        return port


def preferred_or_free_port(preferred: int) -> int:
    """`preferred` if it is free on 127.0.0.1, else a free port (free_port)."""
    with socket.socket() as sock:
        try:
            sock.bind((HOST, preferred))
            return preferred
        except OSError:
            return free_port(avoid={preferred})


def read_pid_file(path: Path) -> int | None:
    """The pid on the first line of `path`, or None if the file is missing or holds no number."""
    try:
        return int(path.read_text().split("\n", 1)[0])
    except (FileNotFoundError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    # A killed process stays a zombie until it is reaped (in containers whose PID 1 never reaps, for good);
    # it has exited all the same.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return not Path("/proc").is_dir()  # no /proc (macOS): trust kill()
    return state != "Z"


def wait_gone(
    pid: int, timeout: float, proc: subprocess.Popen | None = None, alive: Callable[[int], bool] = pid_alive
) -> bool:
    """Wait up to timeout for pid to exit (reaping it if it is our child `proc`); True if it did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return True
        if proc is None and not alive(pid):
            return True
        time.sleep(0.1)
    return False


def terminate(
    pid: int, timeout: float, proc: subprocess.Popen | None = None, alive: Callable[[int], bool] = pid_alive
) -> None:
    """SIGTERM pid, then SIGKILL it if it lingers past timeout.

    `alive` tells whether the process is still there (a caller may also check that the pid was not reused).
    """
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if not wait_gone(pid, timeout, proc, alive):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        wait_gone(pid, 10, proc, alive)


def log_tail(path: Path, lines: int = 40, *, chars: int | None = None, missing: str = "") -> str:
    """The last `lines` lines (or the last `chars` characters) of a text file; `missing` if unreadable."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return missing
    if chars is not None:
        return text[-chars:]
    return "\n".join(text.splitlines()[-lines:])
