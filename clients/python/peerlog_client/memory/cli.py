"""`peerlog-memory`: see and change the memory provider's settings, and check the connection.

peerlog-memory status             the connection, the resolved settings (tokens masked), the key ones
peerlog-memory sessions           the manual directory -> session mappings, and this directory's session
peerlog-memory map NAME           map this directory to session NAME (profile-local file)
peerlog-memory peers              the peer names, aliases and observation toggles
peerlog-memory mode [MODE]        show or set recallMode (hybrid | context | tools)
peerlog-memory tokens [--context N] [--dialectic N]   show or set contextTokens / dialecticMaxChars
peerlog-memory mcp                serve the five tools over MCP stdio (needs the mcp extra)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from peerlog_client import PeerlogError
from peerlog_client.errors import NotFound
from peerlog_client.memory.config import ConfigError, MemoryConfig, connect, load_config, local_path, save_local
from peerlog_client.memory.identity import session_name

KEY_SETTINGS = (
    "recallMode",
    "sessionStrategy",
    "writeFrequency",
    "contextTokens",
    "contextCadence",
    "dialecticCadence",
    "dialecticDepth",
    "dialecticReasoningLevel",
    "reasoningLevelCap",
    "dialecticMaxChars",
    "observationMode",
    "timeout",
)


def _show(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def status(config: MemoryConfig, args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        with connect(config) as client:
            client.workspace(config.resolved_workspace, create=False)
        connection = f"ok ({(time.monotonic() - started) * 1000:.0f} ms)"
    except NotFound:
        # the server answered: a fresh setup, whose first turn creates the workspace
        connection = f"ok ({(time.monotonic() - started) * 1000:.0f} ms): connected; workspace not created yet"
    except PeerlogError as error:
        connection = f"{type(error).__name__}: {error}"
    public = config.public()
    _show(
        {
            "target": config.resolved_target,
            "workspace": config.resolved_workspace,
            "connection": connection,
            "token": "set" if config.resolved_token else "none",
            "tls": (config.resolved_ca_file or "system roots") if config.resolved_tls else "off",
            "session": session_name(config, Path.cwd()),
            "key settings": {k: public[k] for k in KEY_SETTINGS},
            "settings": public,
            "files": {"profile-local": str(local_path())},
        }
    )
    return 0 if connection.startswith("ok") else 1


def sessions(config: MemoryConfig, args: argparse.Namespace) -> int:
    _show(
        {
            "strategy": config.session_strategy,
            "this directory": session_name(config, Path.cwd()),
            "mappings": config.sessions,
        }
    )
    return 0


def map_directory(config: MemoryConfig, args: argparse.Namespace) -> int:
    path = save_local({"sessions": {**config.sessions, str(Path.cwd().resolve()): args.name}})
    print(f"{Path.cwd()} -> {args.name} (in {path})")
    return 0


def peers(config: MemoryConfig, args: argparse.Namespace) -> int:
    _show(
        {
            "user": config.peer_name,
            "ai": config.ai_peer,
            "userDisplayName": config.user_display_name,
            "aiDisplayName": config.ai_display_name,
            "pinUserPeer": config.pin_user_peer,
            "userPeerAliases": config.user_peer_aliases,
            "runtimePeerPrefix": config.runtime_peer_prefix,
            "observation": config.flags.model_dump(by_alias=True),
        }
    )
    return 0


def mode(config: MemoryConfig, args: argparse.Namespace) -> int:
    if args.mode:
        save_local({"recallMode": args.mode})
    print(args.mode or config.recall_mode)
    return 0


def tokens(config: MemoryConfig, args: argparse.Namespace) -> int:
    changes = {
        k: v for k, v in (("contextTokens", args.context), ("dialecticMaxChars", args.dialectic)) if v is not None
    }
    if changes:
        save_local(changes)
    _show(
        {
            "contextTokens": changes.get("contextTokens", config.context_tokens),
            "dialecticMaxChars": changes.get("dialecticMaxChars", config.dialectic_max_chars),
        }
    )
    return 0


def mcp(config: MemoryConfig, args: argparse.Namespace) -> int:
    from peerlog_client.memory.mcp_server import serve

    serve(config)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="peerlog-memory", description="peerlog as an agent's memory: settings.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, run, text in (
        ("status", status, "connection, resolved settings, key settings"),
        ("sessions", sessions, "session mappings"),
        ("peers", peers, "peer identities"),
        ("mcp", mcp, "serve the tools over MCP stdio"),
    ):
        sub.add_parser(name, help=text).set_defaults(run=run)
    m = sub.add_parser("map", help="map this directory to a session")
    m.add_argument("name")
    m.set_defaults(run=map_directory)
    r = sub.add_parser("mode", help="show or set the recall mode")
    r.add_argument("mode", nargs="?", choices=("hybrid", "context", "tools"))
    r.set_defaults(run=mode)
    t = sub.add_parser("tokens", help="show or set the token and character budgets")
    t.add_argument("--context", type=int, help="contextTokens: the injected context's token budget")
    t.add_argument("--dialectic", type=int, help="dialecticMaxChars: the dialectic part's character cap")
    t.set_defaults(run=tokens)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(load_config(), args)
    except ConfigError as error:
        print(f"peerlog-memory: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
