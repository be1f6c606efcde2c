"""Command line: start a detached server and print how to reach it, or stop it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from infra.postgres.embedded import EmbeddedPostgres


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """start|stop --data-dir D [--port P] [--fast]."""
    parser = argparse.ArgumentParser(prog="python -m infra.postgres")
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0, help="0 (default): any free port")
    parser.add_argument("--database", default="peerlog")
    parser.add_argument("--fast", action="store_true", help="fsync off: for throwaway data only (see README)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the action; `start` prints {"url", "dsn", "pid"} as JSON and leaves the server up."""
    args = parse_args(argv)
    server = EmbeddedPostgres(args.data_dir, args.port, args.database, fast=args.fast)
    try:
        if args.action == "stop":
            server.stop()
            return 0
        # pg_ctl detaches the postmaster, so it outlives this process
        server.start()
    except (RuntimeError, TimeoutError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps({"url": server.url, "dsn": server.dsn, "pid": server.pid}))
    return 0
