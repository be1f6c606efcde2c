"""Operator commands given a workspace, peer or derivation that does not exist, or a Kafka they cannot
reach, refuse in one `error:` line with exit status 2, and append nothing."""

from __future__ import annotations

import asyncio

from sqlalchemy import select
from typer.testing import CliRunner

from projections.db import sync_engine
from projections.schema import peers
from services.bus.streams import read, to_the_end
from services.bus.topics import PERCEIVED
from services.cli.client import Client
from services.cli.main import app
from services.events import DerivationPromoted
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
