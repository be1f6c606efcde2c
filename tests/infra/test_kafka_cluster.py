"""Proves `infra.kafka.KafkaCluster` starts three KRaft nodes that replicate a topic three ways
and keep accepting acks=all writes with one node killed (min.insync.replicas=2).

Three JVMs take 50-60 s on the shared 2-core machine, so `make test` skips it; opt in with
PEERLOG_TEST_CLUSTER=1."""

from __future__ import annotations

import os
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from infra.kafka import KafkaCluster

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        os.environ.get("PEERLOG_TEST_CLUSTER") != "1",
        reason="three brokers take about a minute; opt in with PEERLOG_TEST_CLUSTER=1",
    ),
]


def test_three_nodes_replicate_a_topic_and_write_on_with_one_node_killed(tmp_path):
    # a short broker session: the killed node's partitions get new leaders in ~4 s instead of ~9 s
    fast_failover = {"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "1000"}
    with KafkaCluster(tmp_path / "cluster", nodes=3, min_insync=2, properties=fast_failover) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        assert len(admin.list_topics(timeout=10).brokers) == 3
        topic = f"replicated-{uuid.uuid4().hex[:8]}"
        # no replication factor given: the cluster's default (3) applies
        admin.create_topics([NewTopic(topic, 2)])[topic].result(timeout=60)
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        assert all(sorted(p.replicas) == [1, 2, 3] for p in partitions.values())

        cluster.nodes[0].kill()
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True})
        delivered = []
        for i in range(20):
            producer.produce(topic, value=str(i).encode(), on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(60) == 0
        assert delivered == [None] * 20, "two in-sync replicas of three are enough for acks=all"
