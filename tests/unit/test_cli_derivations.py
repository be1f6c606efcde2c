"""The derivation commands refuse bad input with one line and exit 2, before touching Kafka or Postgres."""

from __future__ import annotations

from typer.testing import CliRunner

from services.cli.main import app


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_rederive_into_the_name_of_the_original_derivation_is_refused_in_one_line():
    result = run("rederive", "--name", "original", "-w", "w")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: derivation name 'original' must match ^[A-Za-z0-9_-]{1,64}$ and not be 'original'"
    ]


def test_a_pair_must_name_observer_and_observed():
    for command in (["rederive", "--name", "v2"], ["derivations", "retry"], ["derivations", "promote", "v2"]):
        result = run(*command, "-w", "w", "--pair", "alice")
        assert result.exit_code == 2 and "OBSERVER/OBSERVED" in result.output, result.output


def test_promote_needs_exactly_one_of_pair_and_all_pairs():
    assert run("derivations", "promote", "v2", "-w", "w").exit_code == 2
    assert run("derivations", "promote", "v2", "-w", "w", "--pair", "a/b", "--all-pairs").exit_code == 2
