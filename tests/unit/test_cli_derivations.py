"""The derivation commands refuse bad input with one line and exit 2, before touching Kafka or Postgres."""

from __future__ import annotations

from rich.console import Console
from typer.testing import CliRunner

from services.cli.derivations import side_by_side
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


def test_a_name_ending_in_a_newline_is_refused_like_any_other_character():
    # "v2\n" matched "^…$" (a $ matches before a final newline): promoted, it could never be read by name
    for command in (
        ["rederive", "--name", "v2\n", "-w", "w"],
        ["derivations", "promote", "v2\n", "-w", "w", "--all-pairs"],
    ):
        result = run(*command)
        assert result.exit_code == 2 and "must match" in result.output, result.output


def test_compared_texts_are_shown_as_stored_never_read_as_markup():
    both = "Bob said [/b] and [bold]x[/bold]"
    table = side_by_side("(a, b): current vs v2", "current", "v2", [both], [both, "[red]new[/red]"])
    console = Console(width=200, record=True)
    console.print(table)
    shown = console.export_text()
    assert "Bob said [/b] and [bold]x[/bold]" in shown and "[red]new[/red]" in shown


def test_a_bad_setting_is_one_line_naming_the_variable_for_every_operator_command(monkeypatch):
    # a traceback and exit 1 (what rebuild says for "not switched"), or pydantic's input_value with the
    # tail of the HMAC secret in it
    monkeypatch.setenv("PEERLOG_API_PORT", "99999")
    monkeypatch.setenv("PEERLOG_AUTH_ALGORITHM", "RS256")
    monkeypatch.setenv("PEERLOG_AUTH_SECRET", "s3cr3t-0123456789abcdef0123456789abcdef")
    for command in (
        ["rederive", "--name", "v2", "-w", "w"],
        ["derivations", "retry", "-w", "w"],
        ["reembed", "--model", "e5-small-v2", "-w", "w"],
        ["projections", "rebuild"],
    ):
        result = run(*command)
        assert result.exit_code == 2, (command, result.output)
        assert "Traceback" not in result.output and "0123456789abcdef" not in result.output, result.output
        assert result.output.startswith("error: PEERLOG_"), result.output
