"""Serve a GGUF model over an OpenAI-compatible HTTP API with llama-cpp-python's server.

``ensure_llama_server()`` installs ``llama-cpp-python[server]==0.3.36`` into the running venv. It has
no binary wheel on the registry, so the first install compiles llama.cpp (about 6 min on 2 cores);
the built wheel is kept in ``<repo>/.cache/wheels`` (git-ignored) and every later install reuses it.
The wheel is built with ``-march=native`` (llama.cpp's default), so it belongs to this machine.

``LocalModelServer`` runs ``python -m llama_cpp.server`` as a child process on 127.0.0.1 and waits
until ``GET /v1/models`` answers. ``running_server()`` / ``stop_server()`` and the CLI
(``python -m infra.models start|stop --dir D``) handle a detached server through a state dir:

- ``server.json``  pid, port, base_url, model name and model path of the running server
- ``server.log``   the server's stdout/stderr (llama.cpp load log and per-request timings)

Quirks of this server version are listed in infra/models/README.md (read it before using
``response_format`` or tools).
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Self

from infra.models.qwen import MODEL_NAME, REPO_ROOT
from infra.processes import HOST, free_port, log_tail, terminate

LLAMA_CPP_VERSION = "0.3.36"
LLAMA_CPP_REQUIREMENT = f"llama-cpp-python[server]=={LLAMA_CPP_VERSION}"
WHEEL_DIR_ENV = "PEERLOG_WHEEL_DIR"
# llava (multimodal) is not needed and is a third of the build time
BUILD_CMAKE_ARGS = "-DLLAVA_BUILD=OFF"
# import names of the packages the [server] extra brings
_SERVER_MODULES = ("uvicorn", "fastapi", "pydantic_settings", "sse_starlette", "starlette_context", "yaml")
STATE_FILE = "server.json"
LOG_FILE = "server.log"


class ServerStartError(RuntimeError):
    """The server process died or did not answer in time."""


class LlamaInstallError(RuntimeError):
    """Building or installing llama-cpp-python failed."""


# --------------------------------------------------------------------------- install


def default_wheel_dir() -> Path:
    """Return $PEERLOG_WHEEL_DIR or <repo>/.cache/wheels."""
    override = os.environ.get(WHEEL_DIR_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return REPO_ROOT / ".cache" / "wheels"


def llama_server_installed() -> bool:
    """Tell whether llama-cpp-python==0.3.36 and its [server] extra are importable here."""
    try:
        if importlib.metadata.version("llama-cpp-python") != LLAMA_CPP_VERSION:
            return False
    except importlib.metadata.PackageNotFoundError:
        return False
    return all(importlib.util.find_spec(m) is not None for m in _SERVER_MODULES)


def cached_wheel(wheel_dir: Path | None = None) -> Path | None:
    """The built llama-cpp-python wheel for this Python in wheel_dir, if there is one."""
    wheel_dir = wheel_dir or default_wheel_dir()
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for whl in sorted(wheel_dir.glob(f"llama_cpp_python-{LLAMA_CPP_VERSION}-*.whl")):
        parts = whl.stem.split("-")  # name-version-python-abi-platform
        if parts[2].startswith("py3") or parts[2] == tag:
            return whl
    return None


def _pip(args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    with log.open("a") as out:
        out.write(f"\n$ pip {' '.join(args)}\n")
        out.flush()
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    if proc.returncode != 0:
        tail = log_tail(log, chars=3000)
        raise LlamaInstallError(f"pip {args[0]} failed (exit {proc.returncode}); log {log}:\n{tail}")


def build_wheel(wheel_dir: Path | None = None) -> Path:
    """Compile llama-cpp-python into wheel_dir once (slow) and return the wheel; reuse it after."""
    wheel_dir = wheel_dir or default_wheel_dir()
    wheel_dir.mkdir(parents=True, exist_ok=True)
    if wheel_dir.is_relative_to(REPO_ROOT) and not (wheel_dir / ".gitignore").exists():
        (wheel_dir / ".gitignore").write_text("*\n")
    with (wheel_dir / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second caller waits for the first build
        whl = cached_wheel(wheel_dir)
        if whl is not None:
            return whl
        env = dict(os.environ)
        cmake_args = env.get("CMAKE_ARGS", "")
        if "LLAVA_BUILD" not in cmake_args:
            env["CMAKE_ARGS"] = f"{cmake_args} {BUILD_CMAKE_ARGS}".strip()
        env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        log = wheel_dir / f"llama-cpp-python-{LLAMA_CPP_VERSION}-build.log"
        print(f"building llama-cpp-python {LLAMA_CPP_VERSION} (several minutes; log {log})", file=sys.stderr)
        _pip(["wheel", "--no-deps", "-w", str(wheel_dir), f"llama-cpp-python=={LLAMA_CPP_VERSION}"], log, env)
        whl = cached_wheel(wheel_dir)
        if whl is None:
            raise LlamaInstallError(f"pip wheel succeeded but no llama_cpp_python wheel is in {wheel_dir}")
        return whl


def ensure_llama_server(wheel_dir: Path | None = None) -> None:
    """Install llama-cpp-python[server]==0.3.36 into this venv unless it is there already.

    The package itself comes only from the cached wheel (built on first use); its pure-Python
    dependencies come from the registry as usual.
    """
    if llama_server_installed():
        return
    wheel_dir = wheel_dir or default_wheel_dir()
    build_wheel(wheel_dir)
    log = wheel_dir / f"llama-cpp-python-{LLAMA_CPP_VERSION}-install.log"
    _pip(
        ["install", "--find-links", str(wheel_dir), "--only-binary", "llama-cpp-python", LLAMA_CPP_REQUIREMENT],
        log,
    )
    importlib.invalidate_caches()
    if not llama_server_installed():
        raise LlamaInstallError(f"llama-cpp-python installed but not importable; see {log}")


# --------------------------------------------------------------------------- server


def _get_json(url: str, timeout: float = 2.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback only)
        return json.loads(resp.read())


class LocalModelServer:
    """``python -m llama_cpp.server`` for one GGUF model on 127.0.0.1.

    >>> with LocalModelServer(ensure_model()) as srv:
    ...     OpenAI(base_url=srv.base_url, api_key="local").chat.completions.create(model=srv.model, ...)
    """

    def __init__(
        self,
        model_path: Path | str,
        port: int = 0,
        threads: int = 2,
        ctx: int = 4096,
        *,
        model_name: str = MODEL_NAME,
        chat_format: str | None = None,
        log_path: Path | None = None,
        detach: bool = False,
    ) -> None:
        self.model_path = Path(model_path)
        self.port = port
        self.threads = threads
        self.ctx = ctx
        self.model = model_name  # the name the server answers to (its --model_alias)
        self.chat_format = chat_format  # None: the chat template inside the GGUF
        self.log_path = Path(log_path) if log_path else self.model_path.with_suffix(".server.log")
        self.detach = detach  # own session: survives the parent (for the CLI)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. ``http://127.0.0.1:8765/v1``."""
        return f"http://{HOST}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model_path),
            "--model_alias",
            self.model,
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.ctx),
            "--n_threads",
            str(self.threads),
            "--n_threads_batch",
            str(self.threads),
            # the server defaults to logits for every token (only logprobs need them): an n_ctx x
            # 151,936 float matrix, ~2.5 GB at n_ctx 4096, and slower prompt processing
            "--logits_all",
            "False",
        ]
        if self.chat_format:
            cmd += ["--chat_format", self.chat_format]
        return cmd

    def start(self, timeout: float = 120.0) -> Self:
        """Start the server and wait until ``GET /v1/models`` answers; raise ServerStartError if not."""
        if not self.model_path.is_file():
            raise ServerStartError(f"model file {self.model_path} does not exist")
        if self.port == 0:
            self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=self.detach,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ServerStartError(
                    f"llama_cpp.server exited with {self._proc.returncode}; log {self.log_path}:\n"
                    f"{log_tail(self.log_path, chars=3000)}"
                )
            try:
                _get_json(f"{self.base_url}/models")
                return self
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
                time.sleep(0.25)
        self.stop()
        raise ServerStartError(f"llama_cpp.server did not answer within {timeout}s; log {self.log_path}")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the server, SIGKILL it if it has not exited within ``timeout`` s."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def state(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "port": self.port,
            "base_url": self.base_url,
            "model": self.model,
            "model_path": str(self.model_path),
            "log": str(self.log_path),
        }

    def __enter__(self) -> Self:
        return self if self._proc is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- detached server (CLI)


def _is_our_server(pid: int) -> bool:
    """True if pid is alive and is a llama_cpp.server (guards against pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"llama_cpp.server" in cmdline


def running_server(state_dir: Path) -> dict[str, object] | None:
    """The state of the detached server of state_dir if it is up and answering, else None."""
    path = state_dir / STATE_FILE
    if not path.is_file():
        return None
    state = json.loads(path.read_text())
    if not _is_our_server(int(state["pid"])):
        return None
    try:
        _get_json(f"{state['base_url']}/models")
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return None
    return state


def start_server(
    state_dir: Path,
    port: int = 0,
    threads: int = 2,
    ctx: int = 4096,
    timeout: float = 180.0,
    chat_format: str | None = None,
) -> dict[str, object]:
    """Ensure model and server package, start a detached server for state_dir (idempotent), return its state."""
    from infra.models.qwen import ensure_model

    state_dir.mkdir(parents=True, exist_ok=True)
    already = running_server(state_dir)
    if already is not None:
        return already
    stop_server(state_dir)  # a stale or half-started one
    model = ensure_model()
    ensure_llama_server()
    server = LocalModelServer(
        model, port, threads, ctx, chat_format=chat_format, log_path=state_dir / LOG_FILE, detach=True
    ).start(timeout)
    state = server.state()
    (state_dir / STATE_FILE).write_text(json.dumps(state, indent=2))
    return state


def stop_server(state_dir: Path, timeout: float = 15.0) -> bool:
    """Stop the detached server of state_dir; return whether one was running."""
    path = state_dir / STATE_FILE
    if not path.is_file():
        return False
    pid = int(json.loads(path.read_text())["pid"])
    was_running = _is_our_server(pid)
    if was_running:
        terminate(pid, timeout, alive=_is_our_server)
    path.unlink(missing_ok=True)
    return was_running
