"""What rebuilds leave behind: one rebuild at a time, a killed rebuild's build dropped by the next, a
differing build kept for inspection, and the commands that list and drop those schemas."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import text

from projections.rebuild import rebuild
from projections.rebuild_schemas import RebuildInProgress, one_rebuild, side_schemas
from tests.integration.test_rebuild import projected_session, row_count
from tests.support.processes import settings_env


@pytest.fixture
def projected(settings, projector):
    """A live projection of one session's 300 messages; the engine that reads it."""
    engine = projected_session(settings, 300)
    yield engine
    engine.dispose()


def schemas(engine, settings) -> dict[str, str]:
    """name -> kind of the schemas rebuilds left beside the live one."""
    with engine.connect() as conn:
        return {s.name: s.kind for s in side_schemas(conn, settings.database.schema_name)}


def peerlog(settings, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        env={**os.environ, **settings_env(settings)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def rebuild_once_the_lock_is_free(settings, progress):
    """A rebuild, once Postgres has ended a killed holder's session (and its lock with it)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return rebuild(settings, progress=progress)
        except RebuildInProgress:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_rebuild_killed_mid_way_leaves_a_build_that_the_next_rebuild_drops_before_it_switches(settings, projected):
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "projections", "rebuild"],
        env={**os.environ, **settings_env(settings)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not schemas(projected, settings) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL, "the rebuild finished before it could be killed mid-way"
    left = schemas(projected, settings)
    assert list(left.values()) == ["build"], left

    said: list[str] = []
    report = rebuild_once_the_lock_is_free(settings, said.append)

    assert report.switched and set(report.differences.values()) == {0}
    assert any(line.startswith(f"dropped {next(iter(left))} ") for line in said), said
    assert schemas(projected, settings) == {report.retired: "retired"}


def test_a_second_rebuild_while_one_runs_stops_at_once_and_writes_nothing(settings, projected):
    live = settings.database.schema_name
    with one_rebuild(projected, live):
        with pytest.raises(RebuildInProgress, match="another rebuild"):
            rebuild(settings, progress=lambda _: None)
        refused = peerlog(settings, "projections", "rebuild")
    assert refused.returncode == 2 and "another rebuild" in refused.stderr, refused.stderr
    assert schemas(projected, settings) == {}
    # the lock went with its holder: a rebuild now runs
    assert rebuild(settings, progress=lambda _: None).switched


def test_a_build_that_differs_is_kept_for_inspection_until_an_operator_drops_it(settings, projected):
    live = settings.database.schema_name
    with projected.begin() as conn:  # the live projection no longer matches its log
        conn.execute(text(f"UPDATE \"{live}\".messages SET content = 'tampered' WHERE seq = 7"))
    differed = rebuild(settings, progress=lambda _: None)
    assert not differed.switched and differed.differences["messages"] == 2
    assert schemas(projected, settings) == {differed.schema: "kept"}

    switched = rebuild(settings, progress=lambda _: None, accept_differences=True)
    assert switched.switched
    assert schemas(projected, settings) == {differed.schema: "kept", switched.retired: "retired"}
    listed = peerlog(settings, "projections", "schemas")
    assert listed.returncode == 0
    # the live schema, then the others by name (build before retired)
    assert [line.split("\t")[:2] for line in listed.stdout.splitlines()] == [
        ["live", live],
        ["kept", differed.schema],
        ["retired", switched.retired],
    ]

    for name, why in ((live, "is the live schema"), ("public", "is not a build, kept or retired schema")):
        refused = peerlog(settings, "projections", "drop", name)
        assert refused.returncode == 2 and why in refused.stderr, refused.stderr
    dropped = peerlog(settings, "projections", "drop", differed.schema)
    assert dropped.returncode == 0, dropped.stderr
    assert dropped.stdout.startswith(f"dropped kept schema {differed.schema} ")
    assert schemas(projected, settings) == {switched.retired: "retired"}
    assert row_count(projected, live, "messages") == 300  # reads still served, from the rebuilt schema
