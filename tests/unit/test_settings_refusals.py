"""A bad setting stops a service at start, before it connects to anything: one `error:` line naming the
variable the operator set, never its value, and exit status 2, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from projections.settings import DatabaseSettings, ProjectorSettings
from services.bus.settings import KafkaSettings
from services.cli.main import app
from services.llm.settings import EmbeddingSettings, LlmSettings

# the services docker-compose.yml runs; Kafka and Postgres nowhere, so a service that got past its settings
# would wait for them (and the test's timeout would fail it)
SERVICES = [["serve"], ["projector", "run"], ["worker"], ["webhooks"]]
NOWHERE = {
    "PEERLOG_AUTH_SECRET": "k" * 64,
    "PEERLOG_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
    "PEERLOG_DATABASE_URL": "postgresql+psycopg://peerlog@127.0.0.1:1/peerlog",
}


def refusal(command: list[str], env: dict[str, str]) -> str:
    """The one line `command` refuses `env` with."""
    result = CliRunner().invoke(app, command, env={**NOWHERE, **env})
    assert result.exit_code == 2, result.output
    assert not isinstance(result.exception, Exception), result.exception  # an exit, not an uncaught error
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: "), line
    return line


@pytest.mark.timeout(30)
@pytest.mark.parametrize("command", SERVICES, ids=" ".join)
@pytest.mark.parametrize(
    "name, value",
    [
        ("PEERLOG_LOG_LEVEL", "verbose"),
        ("PEERLOG_LOG_FORMAT", "xml"),
        ("PEERLOG_EMBEDDING_DIMENSIONS", "abc"),
        ("PEERLOG_EMBEDDING_BATCH_SIZE", "0"),
        ("PEERLOG_EMBEDDING_PROVIDER", "hf"),
        ("PEERLOG_EMBEDDING_MODEL", "e5-large"),
        ("PEERLOG_RERANK_MODEL", "nosuch"),
        ("PEERLOG_LLM_DERIVER_TIMEOUT_S", "abc"),
        ("PEERLOG_WORKER_PROCESSORS", "routr,deriver"),
        ("PEERLOG_WORKER_PROCESSORS", " , "),
        ("PEERLOG_KAFKA_TRANSACTION_TIMEOUT_MS", "0"),
    ],
)
def test_a_bad_setting_stops_each_compose_service_in_one_line_naming_it(command, name, value):
    line = refusal(command, {name: value})
    assert f"{name}:" in line or f"{name}," in line, line


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", SERVICES, ids=" ".join)
def test_a_bad_embedding_setting_stops_each_service_before_its_tables_are_imported(command):
    # a fresh interpreter: projections.schema reads the embedding settings as it is imported, which a test
    # process that had imported it already would never see
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **NOWHERE}
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", *command],
        env={**env, "PEERLOG_EMBEDDING_DIMENSIONS": "abc"},
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: PEERLOG_EMBEDDING_DIMENSIONS:"), line


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "name, value",
    [
        ("PEERLOG_AUTH", "maybe"),  # read by a validation_alias, not by AuthSettings' prefix
        ("PEERLOG_LLM_DIALECTIC_LOW_TIMEOUT_S", "abc"),  # a stage's own override of the shared defaults
        ("PEERLOG_LLM_DEDUCTION_SCHEMA_MODE", "xml"),
    ],
)
def test_a_refusal_names_the_variable_the_user_set(name, value):
    line = refusal(["serve"], {name: value})
    assert line.startswith(f"error: {name}: "), line
    assert "PEERLOG_" not in line.removeprefix(f"error: {name}: "), line  # no second, made-up name


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "name, value, said",
    [
        ("PEERLOG_PROJECTOR_POLL_TIMEOUT_S", "-1", "greater than 0"),  # waited forever, deaf to SIGTERM
        ("PEERLOG_PROJECTOR_POLL_TIMEOUT_S", "0", "greater than 0"),  # polled in a busy loop
        ("PEERLOG_DATABASE_POOL_SIZE", "0", "greater than or equal to 1"),  # SQLAlchemy: no limit
        ("PEERLOG_DATABASE_POOL_SIZE", "-1", "greater than or equal to 1"),
        ("PEERLOG_KAFKA_TRANSACTION_TIMEOUT_MS", "0", "greater than or equal to 1000"),  # librdkafka's least
        ("PEERLOG_KAFKA_TRANSACTION_TIMEOUT_MS", "999", "greater than or equal to 1000"),
        ("PEERLOG_KAFKA_TRANSACTION_TIMEOUT_MS", str(2**31), "less than or equal to 2147483647"),
    ],
)
def test_nonpositive_timeouts_and_pool_sizes_are_refused_at_start(name, value, said):
    line = refusal(["projector", "run"], {name: value})
    assert line == f"error: {name}: Input should be {said}", line


def test_the_least_timeouts_and_pool_size_allowed_are_accepted():
    assert ProjectorSettings(poll_timeout_s=0.001).poll_timeout_s == 0.001
    assert DatabaseSettings(pool_size=1).pool_size == 1
    assert KafkaSettings(transaction_timeout_ms=1000).transaction_timeout_ms == 1000


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "name, value",
    [
        ("PEERLOG_LLM_BASE_URL", "127.0.0.1:8080/v1"),
        ("PEERLOG_LLM_BASE_URL", "localhost:8080/v1"),  # read as the scheme "localhost"
        ("PEERLOG_LLM_BASE_URL", "ftp://models.example/v1"),
        ("PEERLOG_LLM_BASE_URL", "http:///v1"),  # no host
        ("PEERLOG_LLM_DERIVER_BASE_URL", "model:8080/v1"),
        ("PEERLOG_EMBEDDING_BASE_URL", "user:hunter2@models.example/v1"),
    ],
)
def test_a_model_url_without_scheme_is_refused_at_start(name, value):
    line = refusal(["worker"], {name: value})
    assert line.startswith(f"error: {name}: should be an http:// or https:// URL"), line
    assert "hunter2" not in line, line  # a URL may hold credentials


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/v1", "https://api.example.com/v1", "HTTP://model:8080"])
def test_an_http_or_https_model_url_is_accepted(monkeypatch, url):
    monkeypatch.setenv("PEERLOG_LLM_SUMMARIZER_BASE_URL", url)
    assert LlmSettings(base_url=url).stage("summarizer").base_url == url
    assert EmbeddingSettings(base_url=url).base_url == url
