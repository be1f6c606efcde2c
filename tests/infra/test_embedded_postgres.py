"""The embedded PostgreSQL 18 + pgvector server used for development and tests.

One server for the whole module (initdb + start once), in a temporary directory.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
from sqlalchemy import create_engine, text

from infra.postgres import EmbeddedPostgres
from infra.postgres.embedded import SERVICE_ACCOUNT, server_settings

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def pg() -> Iterator[EmbeddedPostgres]:
    # Not tmp_path_factory: as root the server runs as another user, and each
    # pytest session starting on this machine chmods /tmp/pytest-of-root back
    # to 0700, which would lock that user out of a data dir below it.
    with (
        tempfile.TemporaryDirectory(prefix="peerlog-pg-test-") as tmp,
        EmbeddedPostgres(Path(tmp) / "data", fast=True) as server,
    ):
        yield server


@pytest.fixture
def conn(pg: EmbeddedPostgres) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg.dsn, autocommit=True) as connection:
        yield connection


def unit_vector(*weights: float) -> str:
    """A 384-dim pgvector literal whose first components are `weights`."""
    values = list(weights) + [0.0] * (384 - len(weights))
    return "[" + ",".join(str(v) for v in values) + "]"


def test_urls_point_at_the_database_on_loopback_with_the_chosen_port(pg: EmbeddedPostgres) -> None:
    assert pg.port > 0
    prefix = "postgresql+psycopg://peerlog:"
    assert pg.url.startswith(prefix)
    assert pg.url.endswith(f"@127.0.0.1:{pg.port}/peerlog")
    assert pg.dsn == "postgresql://" + pg.url.removeprefix("postgresql+psycopg://")


def test_sqlalchemy_url_connects_to_the_peerlog_database(pg: EmbeddedPostgres) -> None:
    engine = create_engine(pg.url)
    try:
        with engine.connect() as connection:
            assert connection.execute(text("SELECT current_database()")).scalar() == "peerlog"
    finally:
        engine.dispose()


def test_server_listens_on_loopback_tcp_only(conn: psycopg.Connection) -> None:
    assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
    assert conn.execute("SHOW unix_socket_directories").fetchone() == ("",)


def test_connecting_without_the_password_is_refused(pg: EmbeddedPostgres) -> None:
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(f"postgresql://peerlog@127.0.0.1:{pg.port}/peerlog", connect_timeout=5)


def test_server_never_runs_as_root(pg: EmbeddedPostgres) -> None:
    owner = psutil.Process(pg.pid).uids().effective
    expected = pwd.getpwnam(SERVICE_ACCOUNT).pw_uid if os.geteuid() == 0 else os.geteuid()
    assert owner == expected != 0


def test_server_is_tuned_for_a_small_box(conn: psycopg.Connection) -> None:
    assert conn.execute("SHOW shared_buffers").fetchone() == ("1GB",)  # a 100k-observation store stays cached
    assert conn.execute("SHOW max_connections").fetchone() == ("200",)


def test_fast_mode_turns_off_durability_settings(conn: psycopg.Connection) -> None:
    for setting in ("fsync", "synchronous_commit", "full_page_writes"):
        assert conn.execute(f"SHOW {setting}").fetchone() == ("off",)


def test_default_mode_keeps_fsync_on() -> None:
    settings = server_settings(port=5432, fast=False)
    assert not {"fsync", "synchronous_commit", "full_page_writes"} & settings.keys()


def test_vector_extension_is_installed_in_the_database(conn: psycopg.Connection) -> None:
    version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    assert version.fetchone() is not None


def test_pgvector_cosine_search_orders_by_similarity(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE memories (id int PRIMARY KEY, embedding vector(384))")
    conn.execute("CREATE INDEX memories_hnsw ON memories USING hnsw (embedding vector_cosine_ops)")
    rows = [(1, unit_vector(1, 0)), (2, unit_vector(0, 1)), (3, unit_vector(1, 1)), (4, unit_vector(-1, 0))]
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO memories VALUES (%s, %s::vector)", rows)
    query = unit_vector(1, 0.1)
    conn.execute("SET enable_seqscan = off")  # make the planner use the HNSW index
    plan = conn.execute(
        "EXPLAIN SELECT id FROM memories ORDER BY embedding <=> %s::vector LIMIT 3", (query,)
    ).fetchall()
    assert "memories_hnsw" in "\n".join(line for (line,) in plan)
    found = conn.execute("SELECT id FROM memories ORDER BY embedding <=> %s::vector LIMIT 4", (query,)).fetchall()
    assert [row[0] for row in found] == [1, 3, 2, 4]


def test_full_text_search_matches_stems_through_a_gin_index(conn: psycopg.Connection) -> None:
    conn.execute(
        "CREATE TABLE notes (id int PRIMARY KEY, body text,"
        " tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', body)) STORED)"
    )
    conn.execute("CREATE INDEX notes_tsv ON notes USING gin (tsv)")
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO notes (id, body) VALUES (%s, %s)",
            [
                (1, "The agent was running the Kafka consumers"),
                (2, "Café menus list crème brûlée"),
                (3, "Nothing relevant here"),
            ],
        )
    conn.execute("SET enable_seqscan = off")
    match = "SELECT id FROM notes WHERE tsv @@ websearch_to_tsquery('english', %s) ORDER BY id"
    plan = conn.execute("EXPLAIN " + match, ("runs consumer",)).fetchall()
    assert "notes_tsv" in "\n".join(line for (line,) in plan)
    assert conn.execute(match, ("runs consumer",)).fetchall() == [(1,)]
    assert conn.execute(match, ("CAFÉ brûlée",)).fetchall() == [(2,)]


def test_data_survives_a_restart(pg: EmbeddedPostgres) -> None:
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE survivors (name text)")
        conn.execute("INSERT INTO survivors VALUES ('kept')")
    port, old_pid = pg.port, pg.pid
    pg.stop()
    assert not pg.is_running()
    pg.start()
    assert (pg.port, pg.is_running()) == (port, True)
    assert pg.pid != old_pid
    with psycopg.connect(pg.dsn) as conn:
        assert conn.execute("SELECT name FROM survivors").fetchall() == [("kept",)]


def test_an_immediate_stop_is_recovered_from_at_the_next_start(pg: EmbeddedPostgres) -> None:
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        # fast mode commits without waiting for the WAL write; this row must reach the WAL first
        conn.execute("SET synchronous_commit = on")
        conn.execute("CREATE TABLE after_crash (name text)")
        conn.execute("INSERT INTO after_crash VALUES ('recovered')")
    pg.stop(immediate=True)
    assert not pg.is_running()
    pg.start()  # recovers from the WAL, as after a crash
    with psycopg.connect(pg.dsn) as conn:
        assert conn.execute("SELECT name FROM after_crash").fetchall() == [("recovered",)]


def test_start_reuses_a_server_already_running_on_its_port(pg: EmbeddedPostgres) -> None:
    pid = pg.pid
    other = EmbeddedPostgres(pg.data_dir, port=pg.port, database="second")
    other.start()
    assert other.pid == pid
    with psycopg.connect(other.dsn) as conn:
        assert conn.execute("SELECT extname FROM pg_extension WHERE extname = 'vector'").fetchone()


def test_start_refuses_a_server_running_on_another_port(pg: EmbeddedPostgres) -> None:
    with pytest.raises(RuntimeError, match=f"already served on port {pg.port}"):
        EmbeddedPostgres(pg.data_dir, port=pg.port + 1).start()


def test_cli_starts_a_detached_server_and_stops_it(pg: EmbeddedPostgres) -> None:
    pg.stop()  # the CLI takes over the same cluster, then hands it back
    try:
        started = run_cli("start", "--data-dir", str(pg.data_dir), "--port", str(pg.port))
        info = json.loads(started.stdout)
        assert set(info) == {"url", "dsn", "pid"}
        assert info["url"] == pg.url and info["dsn"] == pg.dsn
        # the CLI process has exited; the server it started is still serving
        assert psutil.pid_exists(info["pid"])
        with psycopg.connect(info["dsn"]) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        again = run_cli("start", "--data-dir", str(pg.data_dir), "--port", str(pg.port))
        assert json.loads(again.stdout) == info  # starting a running server is a no-op
        run_cli("stop", "--data-dir", str(pg.data_dir))
        assert not pg.is_running()
    finally:
        pg.stop()
        pg.start()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infra.postgres", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )
