"""Command line: start a detached local model server and print how to reach it, or stop it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from infra.models.qwen import ModelDownloadError, ModelIntegrityError
from infra.models.server import LlamaInstallError, ServerStartError, start_server, stop_server


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """start|stop --dir D [--port P] [--threads N] [--ctx N] [--chat-format F]."""
    parser = argparse.ArgumentParser(prog="python -m infra.models")
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--dir", type=Path, required=True, help="state dir (server.json, server.log)")
    parser.add_argument("--port", type=int, default=0, help="0 (default): any free port")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--chat-format", default=None, help="default: the GGUF's own chat template")
    parser.add_argument("--timeout", type=float, default=180.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """`start` prints {"base_url", "model", "pid", ...} as JSON and leaves the server up (idempotent)."""
    args = parse_args(argv)
    try:
        if args.action == "stop":
            print(json.dumps({"stopped": stop_server(args.dir)}))
            return 0
        state = start_server(args.dir, args.port, args.threads, args.ctx, args.timeout, args.chat_format)
    except (ModelIntegrityError, ModelDownloadError, LlamaInstallError, ServerStartError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps(state))
    return 0
