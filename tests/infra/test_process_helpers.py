"""infra/processes.py: the port, pid and log helpers the Kafka broker, Postgres, model server and dev stack share."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from infra.processes import (
    free_port,
    log_tail,
    pid_alive,
    preferred_or_free_port,
    read_pid_file,
    terminate,
)
from tests.support.wait import eventually


def test_a_free_port_can_be_bound_and_avoids_the_ports_given() -> None:
    first = free_port()
    second = free_port(avoid={first})
    assert second != first
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", second))


def test_a_free_port_is_one_the_kernel_never_picks_for_a_bind_to_port_zero() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(1024 <= p < low for p in ports) and len(ports) > 1  # drawn at random, not one port


def test_a_taken_preferred_port_gives_way_to_a_free_one() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert preferred_or_free_port(port) != port
    assert preferred_or_free_port(port) == port


def test_a_pid_file_gives_its_first_line_or_none(tmp_path: Path) -> None:
    pid_file = tmp_path / "x.pid"
    assert read_pid_file(pid_file) is None
    pid_file.write_text("123\n/data\n")
    assert read_pid_file(pid_file) == 123
    pid_file.write_text("not a pid\n")
    assert read_pid_file(pid_file) is None


def test_a_zombie_or_reaped_child_is_not_alive_and_we_are() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(0)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # exited but not yet reaped: a zombie
    eventually(lambda: Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z")
    assert not pid_alive(child.pid)
    child.wait()
    assert not pid_alive(child.pid)


def test_terminate_stops_a_process_that_ignores_sigterm_with_sigkill() -> None:
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            " print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    assert stubborn.stdout.readline().strip() == b"ready"
    terminate(stubborn.pid, 0.5, stubborn)
    assert stubborn.poll() is not None and stubborn.returncode == -9


def test_a_log_tail_is_the_last_lines_or_characters_or_the_missing_text(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    assert log_tail(log) == ""
    assert log_tail(log, missing="(no log)") == "(no log)"
    log.write_text("".join(f"line {i}\n" for i in range(50)))
    assert log_tail(log, 2) == "line 48\nline 49"
    assert log_tail(log, chars=8) == "line 49\n"


def test_a_recorded_pid_another_program_took_is_not_the_stacks_process() -> None:
    # after a reboot `dev down` signalled, then killed, whatever now had the api's recorded pid
    from infra.stack import ours

    other = subprocess.Popen(["sleep", "30"])
    started = "import time; print('up', flush=True); time.sleep(30)"
    api_like = subprocess.Popen([sys.executable, "-c", started, "services.cli.main", "serve"], stdout=subprocess.PIPE)
    try:
        # its command line is the forked parent's until exec: under load, read before it, it was pytest's
        assert api_like.stdout.readline() == b"up\n"
        assert not ours(other.pid, "api")
        assert ours(api_like.pid, "api") and not ours(api_like.pid, "worker")
    finally:
        for proc in (other, api_like):
            proc.kill()
            proc.wait()
