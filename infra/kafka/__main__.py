"""CLI: `python -m infra.kafka start --data-dir D [--port P] [--brokers 3]` / `python -m infra.kafka stop --data-dir D`.

With --brokers N (N > 1) it starts a KRaft cluster of N nodes in D/node-1 … D/node-N (replication
factor N, min.insync.replicas --min-insync); stop stops every node found under D.
"""

import argparse
import json
import sys
from pathlib import Path

from infra.kafka.broker import KafkaBroker, running_broker, stop_broker
from infra.kafka.cluster import KafkaCluster


def main(argv: list[str] | None = None) -> int:
    """Start a detached broker (printing its address as JSON) or stop one by data dir."""
    parser = argparse.ArgumentParser(prog="python -m infra.kafka")
    parser.add_argument("command", choices=["start", "stop"])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0, help="broker port (0: pick a free one)")
    parser.add_argument("--controller-port", type=int, default=0)
    parser.add_argument("--heap", default="768m")
    parser.add_argument("--brokers", type=int, default=1, help="nodes; more than 1 starts a KRaft cluster")
    parser.add_argument("--min-insync", type=int, default=2, help="min.insync.replicas of a cluster")
    args = parser.parse_args(argv)

    if args.command == "stop":
        nodes = sorted(args.data_dir.glob("node-*")) or [args.data_dir]
        stopped = [stop_broker(node) for node in nodes]
        print(json.dumps({"stopped": any(stopped)}))
        return 0
    if args.brokers > 1:
        cluster = KafkaCluster(args.data_dir, args.brokers, args.min_insync, heap="512m").start()
        # the JVMs run in their own sessions and outlive this process
        print(json.dumps({"bootstrap_servers": cluster.bootstrap_servers, "pids": [n.pid for n in cluster.nodes]}))
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
