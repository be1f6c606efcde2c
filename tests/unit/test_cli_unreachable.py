"""Operator commands facing a Postgres or an API they cannot reach, or a rebuild stopped by an error that
waiting would not fix: one `error:` line naming what to check, exit status 2, no traceback."""

from __future__ import annotations

import pytest
from psycopg import errors
from sqlalchemy.exc import OperationalError
from typer.testing import CliRunner

from services.cli.main import app

NOWHERE = {"PEERLOG_DATABASE_URL": "postgresql+psycopg://peerlog@127.0.0.1:1/peerlog"}


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env=env)


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert not isinstance(result.exception, Exception), result.exception  # an exit, not an uncaught error
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: "), line
    return line


@pytest.mark.parametrize(
    "command",
    [
        ["projections", "schemas"],
        ["projections", "drop", "peerlog_retired_20261204221704a1b2c3"],
        ["rederive", "--name", "v2", "-w", "w"],
        ["derivations", "retry", "-w", "w"],
        ["derivations", "promote", "v2", "-w", "w", "--all-pairs"],
        ["reembed", "--model", "all-MiniLM-L6-v2", "-w", "w"],
    ],
)
def test_a_command_that_cannot_reach_postgres_says_so_in_one_line(command):
    line = one_error_line(run(*command, env=NOWHERE))
    assert line.startswith("error: Postgres did not answer") and "PEERLOG_DATABASE_URL" in line, line


def test_compare_against_an_api_it_cannot_reach_says_so_in_one_line():
    line = one_error_line(
        run("derivations", "compare", "--name", "v2", "-w", "w", "--pair", "a/b", "--address", "127.0.0.1:1")
    )
    assert "UNAVAILABLE" in line and "127.0.0.1:1" in line, line


def test_a_rebuild_stopped_by_a_statement_timeout_names_it_and_says_the_build_is_carried_on(monkeypatch):
    def timing_out(*_, **__):
        raise OperationalError("SELECT", {}, errors.QueryCanceled("canceling statement due to statement timeout"))

    monkeypatch.setattr("projections.rebuild.rebuild", timing_out)
    line = one_error_line(run("projections", "rebuild"))
    assert "QueryCanceled (SQLSTATE 57014): canceling statement due to statement timeout" in line, line
    assert "carries on its build" in line, line


@pytest.mark.parametrize(
    "error, phrase",
    [
        ("AppendFailed", "Kafka did not take a write"),
        ("AppendUnresolved", "running again is safe"),
        (
            "ModelUnavailable",
            "the model did not answer ([embedding] model unavailable after 3 attempt(s): TimeoutError)",
        ),
        ("ModelRequestRejected", "request rejected with HTTP 401; the server's log has its reply"),
    ],
)
def test_a_run_whose_write_or_model_call_fails_says_so_in_one_line(error, phrase, capsys):
    import typer

    from services.bus.producer import AppendFailed, AppendUnresolved
    from services.cli.main import _plainly
    from services.llm.errors import ModelRequestRejected, ModelUnavailable

    raised = {
        "AppendFailed": AppendFailed("the log rejected the write: broker down"),
        "AppendUnresolved": AppendUnresolved("the log did not confirm whether the write was committed"),
        "ModelUnavailable": ModelUnavailable("embedding", 3, TimeoutError()),
        "ModelRequestRejected": ModelRequestRejected("embedding", 401, '{"error": "Incorrect API key sk-proj-x"}'),
    }[error]
    with pytest.raises(typer.Exit) as ended, _plainly():
        raise raised
    [line] = capsys.readouterr().err.strip().splitlines()
    assert ended.value.exit_code == 2 and line.startswith("error: ") and phrase in line, line
    assert "sk-proj" not in line


def test_abort_open_without_java_says_so_in_one_line(monkeypatch):
    # the image has no java; the runner's own log tells operators to run this, and it printed a traceback
    from services.cli import transactions

    monkeypatch.setattr(transactions.shutil, "which", lambda _name: None)
    monkeypatch.setattr(
        transactions, "abort_open_anywhere", lambda kafka, *_: transactions._transactions_command(kafka, "list")
    )
    line = one_error_line(run("topics", "abort-open", "peerlog.sessions"))
    assert "java not found on PATH" in line, line
