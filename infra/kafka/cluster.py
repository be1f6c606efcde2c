"""A local KRaft cluster of several Apache Kafka nodes on 127.0.0.1 (default three).

Each node is a ``KafkaBroker`` (combined broker + controller) in ``data_dir/node-<id>``, all formatted
with one cluster id and one static voter set. Topics replicate to every node by default
(replication factor = node count) and need ``min_insync`` replicas to acknowledge a write, so with
three nodes and ``min.insync.replicas=2`` one node can die without an acknowledged write being lost
or writes stopping. Used by ``python -m infra.kafka start --brokers 3`` and tests/bench/cluster.py.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

from infra.kafka.broker import BrokerStartError, KafkaBroker, new_cluster_id
from infra.processes import HOST, free_port


def cluster_properties(node_id: int, voters: str, nodes: int, min_insync: int) -> dict[str, str]:
    """The settings a node of an n-node cluster overrides in the single-node defaults."""
    replicas, isr = str(nodes), str(min_insync)
    return {
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "default.replication.factor": replicas,
        "min.insync.replicas": isr,
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": isr,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": isr,
        # a replica that fell behind (a node that was killed) is never elected: no acknowledged write is dropped
        "unclean.leader.election.enable": "false",
    }


class KafkaCluster:
    """n KRaft nodes on 127.0.0.1 with replication factor n and min.insync.replicas=min_insync.

    Ports are picked once, so bootstrap_servers and each node's address survive restarts.
    """

    def __init__(
        self,
        data_dir: Path,
        nodes: int = 3,
        min_insync: int = 2,
        heap: str = "512m",
        properties: Mapping[str, str] | None = None,
    ) -> None:
        if not 1 <= min_insync <= nodes:
            raise ValueError(f"min_insync must be between 1 and {nodes}")
        self.data_dir = Path(data_dir).resolve()
        cluster_id_file = self.data_dir / "cluster.id"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not cluster_id_file.exists():
            cluster_id_file.write_text(new_cluster_id() + "\n")
        cluster_id = cluster_id_file.read_text().strip()
        taken: set[int] = set()
        for _ in range(2 * nodes):
            taken.add(free_port(taken))
        picked = sorted(taken)
        ports = list(zip(picked[0::2], picked[1::2]))
        voters = ",".join(f"{i + 1}@{HOST}:{c}" for i, (_, c) in enumerate(ports))
        self.nodes = [
            KafkaBroker(
                self.data_dir / f"node-{i + 1}",
                port=p,
                controller_port=c,
                heap=heap,
                cluster_id=cluster_id,
                properties={**cluster_properties(i + 1, voters, nodes, min_insync), **(properties or {})},
            )
            for i, (p, c) in enumerate(ports)
        ]

    @property
    def bootstrap_servers(self) -> str:
        """Every node's address, comma-separated, so a client finds the cluster with any one node down."""
        return ",".join(n.bootstrap_servers for n in self.nodes)

    def start(self, timeout: float = 180) -> "KafkaCluster":
        """Start every node at once (a node serves only when a quorum of controllers is up) and wait."""
        errors: list[BaseException] = []

        def start(node: KafkaBroker) -> None:
            try:
                node.start(timeout)
            except BaseException as err:  # noqa: BLE001 - re-raised below, in the caller's thread
                errors.append(err)

        threads = [threading.Thread(target=start, args=(n,)) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise BrokerStartError(f"{len(errors)} of {len(self.nodes)} nodes failed to start") from errors[0]
        return self

    def stop(self, timeout: float = 30) -> None:
        """Stop every node (controlled shutdown, SIGKILL after timeout)."""
        for node in self.nodes:
            node.stop(timeout)

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"KafkaCluster({self.bootstrap_servers}, data_dir={str(self.data_dir)!r})"
