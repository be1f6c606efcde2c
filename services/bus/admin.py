"""Create peerlog's topics, idempotently."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from services.bus.settings import KafkaSettings
from services.bus.topics import ALL_TOPICS, TopicSpec


def admin_client(settings: KafkaSettings) -> AdminClient:
    return AdminClient(settings.client_config())


def topic_config(spec: TopicSpec, replication_factor: int) -> dict[str, str]:
    """A topic's settings. Replicated, an append is acknowledged only once two replicas hold it, and a replica
    that fell behind never becomes leader: with a broker's defaults (min.insync.replicas 1, which Kafka ships),
    `acks=all` is satisfied by the leader alone once the others drop out of sync, and losing that node lost
    acknowledged writes of the log every projection is rebuilt from."""
    config = dict(spec.config)
    if replication_factor > 1:
        config |= {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    return config


def create_topics(
    settings: KafkaSettings, specs: tuple[TopicSpec, ...] = ALL_TOPICS, timeout: float = 30.0
) -> dict[str, str]:
    """Create every topic that is missing; return {topic: "created" | "exists"}."""
    admin = admin_client(settings)
    wanted = [
        NewTopic(
            spec.full_name(settings.topic_prefix),
            num_partitions=settings.partitions,
            replication_factor=settings.replication_factor,
            config=topic_config(spec, settings.replication_factor),
        )
        for spec in specs
    ]
    outcome: dict[str, str] = {}
    for name, future in admin.create_topics(wanted, request_timeout=timeout).items():
        try:
            future.result(timeout)
            outcome[name] = "created"
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            outcome[name] = "exists"
    return outcome


def partitions_of(settings: KafkaSettings, topic: str, timeout: float = 10.0) -> list[int]:
    """Partition ids of one topic (raises LookupError if it does not exist)."""
    meta = admin_client(settings).list_topics(topic, timeout=timeout)
    info = meta.topics.get(topic)
    if info is None or info.error is not None:
        raise LookupError(f"topic {topic} does not exist; run `peerlog topics create`")
    return sorted(info.partitions)
