"""Local single-node Apache Kafka broker (KRaft) for peerlog's dev loop and tests."""

from infra.kafka.broker import (
    KAFKA_VERSION,
    BrokerStartError,
    KafkaBroker,
    ensure_jars,
    running_broker,
    stop_broker,
)
from infra.kafka.cluster import KafkaCluster

__all__ = [
    "KAFKA_VERSION",
    "BrokerStartError",
    "KafkaBroker",
    "ensure_jars",
    "running_broker",
    "stop_broker",
    "KafkaCluster",
]
