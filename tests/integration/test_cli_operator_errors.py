"""Operator commands given a workspace, peer or derivation that does not exist, or a Kafka they cannot
reach, refuse in one `error:` line with exit status 2, and append nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import select
from typer.testing import CliRunner

from infra.processes import free_port
from projections.db import sync_engine
from projections.schema import peers
from services.bus.streams import read, to_the_end
from services.bus.topics import OBSERVATIONS, PERCEIVED
from services.cli.client import Client
from services.cli.main import app
from services.events import DerivationDeadLettered, DerivationPromoted, MessagePerceived
from tests.integration.test_rederive import current_rows
from tests.support.extractor import extract_each_turn
from tests.support.model_server import Reply
from tests.support.processes import settings_env
from tests.support.wait import eventually


def projected_peers(settings) -> set[str]:
    engine = sync_engine(settings.database)
    try:
        with engine.connect() as conn:
            return set(conn.scalars(select(peers.c.peer_id).where(peers.c.workspace_id == "w")))
    finally:
        engine.dispose()


async def refusal(env: dict, *args: str) -> str:
    """The one error line of the command (run off the event loop, which serves the API)."""
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args), env=env)
    assert result.exit_code == 2, result.output
    assert not isinstance(result.exception, Exception), result.exception
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: "), line
    return line


def promotions(settings) -> list[DerivationPromoted]:
    topic = PERCEIVED.full_name(settings.kafka.topic_prefix)
    return [e for m in to_the_end(settings.kafka, topic) if isinstance(e := read(m.value()), DerivationPromoted)]


async def test_a_workspace_peer_or_derivation_that_does_not_exist_is_refused_in_one_line(channel, settings):
    await Client(channel).setup_conversation("w", "s")
    eventually(lambda: projected_peers(settings) == {"alice", "bob"}, 30)
    env = {**settings_env(settings), "PEERLOG_AUTH_TOKEN": channel.token}
    nosuch = "error: workspace 'nosuch' does not exist (or is not projected yet); check -w"
    for command in (
        ["reembed", "--model", "all-MiniLM-L6-v2", "-w", "nosuch"],
        ["rederive", "--name", "v2", "-w", "nosuch"],
        ["derivations", "retry", "-w", "nosuch"],
        ["derivations", "promote", "v2", "-w", "nosuch", "--pair", "a/b"],
    ):
        assert await refusal(env, *command) == nosuch, command
    for command in (
        ["rederive", "--name", "v2", "-w", "w", "--pair", "alice/nobody"],
        ["derivations", "promote", "v2", "-w", "w", "--pair", "alice/nobody"],
    ):
        line = await refusal(env, *command)
        assert line == "error: workspace 'w' has no peer 'nobody'; check --pair OBSERVER/OBSERVED", command
    assert promotions(settings) == []  # a promotion is permanent: none was appended

    compare = ["derivations", "compare", "--pair", "alice/bob", "--address", channel.address]
    written = await Client(channel).create_observations("w", "alice", "bob", ["bob likes tea"])  # in every one
    await Client(channel).all_observations("w", "alice", "bob", written.consistency_token)
    line = await refusal(env, *compare, "--name", "nosuch", "-w", "w")
    assert "derivation 'nosuch' holds no observations of (alice, bob)" in line, line
    line = await refusal(env, *compare, "--name", "v2", "-w", "nosuch")
    assert line.startswith("error: NOT_FOUND: ") and "check -w" in line, line


async def test_reembed_with_kafka_out_of_reach_says_so_in_one_line(channel, settings):
    await Client(channel).setup_conversation("w", "s")
    eventually(lambda: projected_peers(settings) == {"alice", "bob"}, 30)
    env = {**settings_env(settings), "PEERLOG_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    line = await refusal(env, "reembed", "--model", "all-MiniLM-L6-v2", "-w", "w")
    assert line.startswith("error: Kafka did not answer") and "PEERLOG_KAFKA_BOOTSTRAP_SERVERS" in line, line


async def test_a_run_under_a_topic_prefix_with_no_topics_stops_in_one_line(channel, settings):
    # it read the missing topics as empty: "0 vectors appended", exit 0, step 1 of a migration "done"
    await Client(channel).setup_conversation("w", "s")
    eventually(lambda: projected_peers(settings) == {"alice", "bob"}, 30)
    env = {**settings_env(settings), "PEERLOG_KAFKA_TOPIC_PREFIX": "nosuch."}
    for command in (
        ["reembed", "--model", "all-MiniLM-L6-v2", "-w", "w"],
        ["rederive", "--name", "v2", "-w", "w"],
        ["derivations", "retry", "-w", "w", "--pair", "alice/bob"],
    ):
        line = await refusal(env, *command)
        assert "topic nosuch." in line and "does not exist; check PEERLOG_KAFKA_TOPIC_PREFIX" in line, (command, line)


def _serve_refusal(settings, env: dict[str, str]) -> list[str]:
    """The output of `peerlog serve` in a subprocess, which must exit 2 at once."""
    out = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "serve"],
        env={**os.environ, **settings_env(settings), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    return out.stderr.strip().splitlines()


def _pem_files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    return {"PEERLOG_API_TLS_CERT": str(tmp_path / "garbage.pem"), "PEERLOG_API_TLS_KEY": str(tmp_path / "garbage.pem")}


async def test_serve_refuses_bad_settings_in_one_line_before_anything_starts(settings, tmp_path):
    # each was a traceback (with two processes, one per child): Failed to bind, OverflowError,
    # NoSuchModuleError, ModuleNotFoundError psycopg2, ValueError in the children
    port = {"PEERLOG_API_PORT": str(free_port())}
    cases = [
        ("PEERLOG_API_TLS_CERT", {**port, **_pem_files(tmp_path)}),
        ("PEERLOG_API_METRICS_PORT", {**port, "PEERLOG_API_METRICS_PORT": "70000"}),
        ("PEERLOG_API_PORT", {"PEERLOG_API_PORT": "99999"}),
        ("starts with postgres://", {**port, "PEERLOG_DATABASE_URL": "postgres://peerlog@127.0.0.1/peerlog"}),
        ("starts with postgresql://", {**port, "PEERLOG_DATABASE_URL": "postgresql://peerlog@127.0.0.1/peerlog"}),
        ("PEERLOG_AUTH_SECRET must be", {**port, "PEERLOG_AUTH_SECRET": "short", "PEERLOG_API_PROCESSES": "2"}),
        ("PEERLOG_API_TLS_CERT", {**port, **_pem_files(tmp_path), "PEERLOG_API_PROCESSES": "2"}),
        (
            "PEERLOG_AUTH_PUBLIC_KEY_FILE",
            {
                **port,
                "PEERLOG_AUTH_SECRET": "",
                "PEERLOG_AUTH_ALGORITHM": "ES256",
                "PEERLOG_AUTH_PUBLIC_KEY_FILE": str(tmp_path / "garbage.pem"),
            },
        ),
    ]
    for said, env in cases:
        lines = await asyncio.to_thread(_serve_refusal, settings, env)
        errors = [line for line in lines if line.startswith("error: ")]
        assert len(errors) == 1 and said in errors[0], lines
        assert not any("Traceback" in line for line in lines), lines


async def test_keys_create_with_an_expiry_no_clock_holds_says_so_in_one_line(settings):
    # timedelta's OverflowError was a traceback
    line = await refusal(settings_env(settings), "keys", "create", "-w", "acme", "--expires", "2000000000d")
    assert "longer than 36500d (100 years)" in line


async def test_a_promote_whose_catch_up_the_model_keeps_failing_switches_nothing_and_rederive_says_parked(
    channel, settings, model_server, start_worker
):
    model_server.reply_with(
        lambda request: (
            Reply(content="not JSON at all") if request.get("model") == "broken" else extract_each_turn(request)
        )
    )
    start_worker("router,deriver")
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.add("w", "s", [("alice", "I adopted a cat named Miso")])
    eventually(lambda: len(current_rows(settings)) == 1, 60)
    env = {**settings_env(settings), "PEERLOG_LLM_BASE_URL": model_server.base_url, "PEERLOG_LLM_MAX_RETRIES": "0"}
    promote = [
        "derivations",
        "promote",
        "v2",
        "-w",
        "w",
        "--pair",
        "alice/alice",
        "--model",
        "broken",
        "--from-scratch",
    ]
    refused = await asyncio.to_thread(CliRunner().invoke, app, promote, env=env)
    [line] = [x for x in refused.output.splitlines() if x.startswith("error: ")]  # beside the catch-up's progress
    assert refused.exit_code == 2 and line.startswith("error: 1 messages could not be derived into 'v2'"), line
    assert "nothing was promoted" in line, line
    assert promotions(settings) == []  # reads stay on the original derivation
    assert [o.content for o in await c.all_observations("w", "alice", "alice")] == [
        "The target said: I adopted a cat named Miso"
    ]
    result = await asyncio.to_thread(
        CliRunner().invoke, app, ["rederive", "--name", "v3", "-w", "w", "--model", "broken"], env=env
    )
    assert result.exit_code == 1, result.output
    assert "0 messages derived into 'v3', 1 parked" in result.output and "1 messages were parked" in result.output


def dead_letters(settings) -> list[DerivationDeadLettered]:
    topic = OBSERVATIONS.full_name(settings.kafka.topic_prefix)
    return [e for m in to_the_end(settings.kafka, topic) if isinstance(e := read(m.value()), DerivationDeadLettered)]


async def test_rederive_with_the_model_out_of_reach_stops_in_one_line_and_parks_nothing(
    channel, settings, model_server, start_worker
):
    # each batch was parked in turn (a dead letter on the log for every one, retried for minutes each) and
    # the run ended "the model kept failing on their batches", never naming the URL
    start_worker("router")  # perceived, so a rederive has something to derive
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.add("w", "s", [("alice", "I adopted a cat named Miso"), ("bob", "Lovely")])
    eventually(lambda: sum(isinstance(read(m.value()), MessagePerceived) for m in perceived_records(settings)) >= 2, 60)
    env = {**settings_env(settings), "PEERLOG_LLM_BASE_URL": "http://127.0.0.1:1/v1", "PEERLOG_LLM_MAX_RETRIES": "0"}
    line = await refusal(env, "rederive", "--name", "v2", "-w", "w")
    assert line.startswith("error: the model did not answer") and "PEERLOG_LLM_BASE_URL" in line, line
    assert dead_letters(settings) == []


def perceived_records(settings) -> list:
    return list(to_the_end(settings.kafka, PERCEIVED.full_name(settings.kafka.topic_prefix)))
