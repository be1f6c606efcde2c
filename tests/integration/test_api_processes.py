"""`peerlog serve` with PEERLOG_API_PROCESSES=2: two server processes on one port, supervised as one."""

from __future__ import annotations

import os
import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infra.processes import free_port
from infra.stack import wait_for_api
from peerlog.v1 import workspaces_pb2, workspaces_pb2_grpc
from services.api.channels import channel
from tests.support.auth import admin_token
from tests.support.processes import Worker


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def _established_on(port: int) -> set[str]:
    """Inodes of established TCP connections whose local end is `port`."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                inodes.add(fields[9])
    return inodes


def _server_pids(parent: int) -> list[int]:
    """The supervisor's server children (multiprocessing's resource tracker is not one)."""
    return [c for c in _children(parent) if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def _scrape(port: int) -> dict[tuple[str, frozenset], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def two_process_api(settings, projector, tmp_path):
    port, metrics_port = free_port(), free_port()
    api = Worker(
        settings,
        tmp_path / "api.log",
        {"PEERLOG_API_PORT": str(port), "PEERLOG_API_PROCESSES": "2", "PEERLOG_API_METRICS_PORT": str(metrics_port)},
        command="serve",
    ).start()
    try:
        wait_for_api(port, timeout=180)  # two processes each load the models: minutes on a loaded machine
        # the port answers as soon as one process listens; the tests need both
        deadline = time.monotonic() + 180
        while api.log_text().count("peerlog API listening") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        yield api, port, admin_token(settings), metrics_port
    finally:
        api.stop()
        print(api.log_text()[-3000:])


def test_two_api_processes_share_the_port_both_serve_calls_and_one_endpoint_counts_all(two_process_api):
    api, port, token, metrics_port = two_process_api
    # each channel its own connection, like 16 separate clients (channels in one process share by default)
    channels = [channel(f"127.0.0.1:{port}", token, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(16)]
    try:
        for i, ch in enumerate(channels):
            reply = workspaces_pb2_grpc.WorkspaceServiceStub(ch).GetOrCreateWorkspace(
                workspaces_pb2.GetOrCreateWorkspaceRequest(workspace_id=f"w{i % 3}"), timeout=30
            )
            assert reply.workspace.workspace_id == f"w{i % 3}"
        established = _established_on(port)
        holding = [pid for pid in _server_pids(api.proc.pid) if _socket_inodes(pid) & established]
        # 16 connections spread by the kernel: all on one process would be a 1 in 32,768 chance
        assert len(holding) == 2, f"only {holding} hold client connections"
        # one endpoint sums both processes: every call counted once, whichever process answered it
        samples = _scrape(metrics_port)
        method = frozenset({("method", "/peerlog.v1.WorkspaceService/GetOrCreateWorkspace"), ("code", "OK")})
        assert samples.get(("peerlog_rpc_requests_total", method)) == 16
        assert samples.get(("peerlog_rpc_duration_seconds_count", method)) == 16
    finally:
        for ch in channels:
            ch.close()


def test_when_one_api_process_dies_the_whole_server_stops_so_a_supervisor_notices(two_process_api):
    api, port, _, _ = two_process_api
    servers = _server_pids(api.proc.pid)
    assert len(servers) == 2
    os.kill(servers[1], signal.SIGKILL)
    assert api.proc.wait(timeout=30) == 1  # a failure its own supervisor sees
    assert "exited with" in api.log_text()
    assert not _still_running_after(servers[:1], 10)


def _running(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _still_running_after(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if _running(p)]


def test_sigterm_stops_every_api_process_and_removes_their_metric_files(two_process_api):
    api, _, _, _ = two_process_api
    servers = _server_pids(api.proc.pid)
    environ = dict(e.split(b"=", 1) for e in Path(f"/proc/{servers[0]}/environ").read_bytes().split(b"\0") if e)
    metrics_dir = Path(environ[b"PROMETHEUS_MULTIPROC_DIR"].decode())
    assert any(metrics_dir.glob("*.db"))  # the children count in their files there
    api.proc.send_signal(signal.SIGTERM)
    assert api.proc.wait(timeout=30) == 0
    assert not _still_running_after(servers, 10)
    assert not metrics_dir.exists()  # removed with the server


def test_sigterm_while_the_processes_start_still_stops_every_one(settings, projector, tmp_path):
    api = Worker(
        settings,
        tmp_path / "api.log",
        {"PEERLOG_API_PORT": str(free_port()), "PEERLOG_API_PROCESSES": "2"},
        command="serve",
    ).start()
    try:
        deadline = time.monotonic() + 180
        while len(servers := _server_pids(api.proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(servers) == 2, api.log_text()
        api.proc.send_signal(signal.SIGTERM)  # before either is listening: the models are still loading
        api.proc.wait(timeout=30)
        assert not _still_running_after(servers, 10)
    finally:
        api.kill()


def test_an_api_process_does_not_outlive_its_killed_supervisor(two_process_api):
    api, port, _, _ = two_process_api
    servers = _server_pids(api.proc.pid)
    api.proc.kill()
    api.proc.wait(timeout=30)
    assert not _still_running_after(servers, 10)
    with pytest.raises(OSError):  # nothing is left holding the port
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
