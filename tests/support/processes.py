"""Run peerlog processes (the worker, the API server) as real subprocesses, so tests can kill them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pydantic import SecretStr

from services.settings import Settings


def settings_env(settings: Settings) -> dict[str, str]:
    """The PEERLOG_* environment that reproduces `settings` in another process."""
    env: dict[str, str] = {}
    sections = {
        "kafka": "KAFKA",
        "database": "DATABASE",
        "projector": "PROJECTOR",
        "api": "API",
        "worker": "WORKER",
        "deriver": "DERIVER",
        "summarizer": "SUMMARIZER",
        "auth": "AUTH",
        "webhook": "WEBHOOK",
    }
    for attr, prefix in sections.items():
        for name, value in getattr(settings, attr).model_dump().items():
            if value is None:  # unset (a TLS file): the other process's default is None too
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            env[f"PEERLOG_{prefix}_{name.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


class Worker:
    """`peerlog worker` (or another `command`) in a subprocess, logging to a file."""

    def __init__(
        self, settings: Settings, log_path: Path, extra_env: dict[str, str] | None = None, command: str = "worker"
    ) -> None:
        self.env = {**os.environ, **settings_env(settings), **(extra_env or {})}
        self.log_path = log_path
        self.command = command
        self.proc: subprocess.Popen | None = None

    def start(self) -> Worker:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", *self.command.split()],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        return self

    def wait_for(self, line: str, timeout: float = 180) -> bool:
        """Whether the log shows `line` within `timeout` s; False at once if the process has ended (a test may
        start one that refuses to run). A loaded CI machine took 49 s to start a worker (imports, the local
        models, the group join): a test's own waits then measured its start-up, not what it tests."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if line in self.log_text():
                return True
            if self.proc is None or self.proc.poll() is not None:
                return False
            time.sleep(0.2)
        return False

    def stop(self, timeout: float = 30) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def first_line_then_kill(settings: Settings, module: str, *args: str) -> str:
    """Run `python -m module args` with `settings`' environment, read the first line it prints (a sign it
    reached the state a test wants), then SIGKILL it: a process that dies there, leaving what it left."""
    dying = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        env={**os.environ, **settings_env(settings)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        return dying.stdout.readline()
    finally:
        dying.send_signal(signal.SIGKILL)
        dying.wait()
