"""CLI: `python -m infra.kafka start --data-dir D [--port P]` / `python -m infra.kafka stop --data-dir D`."""

import argparse
import json
import sys
from pathlib import Path

from infra.kafka.broker import KafkaBroker, running_broker, stop_broker


def main(argv: list[str] | None = None) -> int:
    """Start a detached broker (printing its address as JSON) or stop one by data dir."""
    parser = argparse.ArgumentParser(prog="python -m infra.kafka")
    parser.add_argument("command", choices=["start", "stop"])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0, help="broker port (0: pick a free one)")
    parser.add_argument("--controller-port", type=int, default=0)
    parser.add_argument("--heap", default="768m")
    args = parser.parse_args(argv)

    if args.command == "stop":
        stopped = stop_broker(args.data_dir)
        print(json.dumps({"stopped": stopped}))
        return 0
    already = running_broker(args.data_dir)
    if already is not None:
        print(json.dumps(already))
        return 0
    broker = KafkaBroker(args.data_dir, args.port, args.controller_port, args.heap).start()
    # The JVM runs in its own session, so it outlives this process; no stop() here.
    print(json.dumps({"bootstrap_servers": broker.bootstrap_servers, "pid": broker.pid}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
