"""Helpers the local infra shares: free ports, pid files, process liveness and log tails."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

HOST = "127.0.0.1"


def free_port(avoid: set[int] | frozenset[int] = frozenset()) -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it), not one in `avoid`."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port = sock.getsockname()[1]
        if port not in avoid:
            return port


def preferred_or_free_port(preferred: int) -> int:
    """`preferred` if it is free on 127.0.0.1, else a free port the kernel picks."""
    with socket.socket() as sock:
        try:
            sock.bind((HOST, preferred))
            return preferred
        except OSError:
            sock.bind((HOST, 0))
            return sock.getsockname()[1]


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
