"""The settings peerlog creates its topics with."""

from __future__ import annotations

from services.bus.admin import topic_config
from services.bus.topics import ALL_TOPICS


def test_replicated_topics_acknowledge_a_write_only_once_two_replicas_hold_it():
    for spec in ALL_TOPICS:
        config = topic_config(spec, replication_factor=3)
        assert config["min.insync.replicas"] == "2", spec.name
        assert config["unclean.leader.election.enable"] == "false", spec.name
        assert {k: config[k] for k in spec.config} == dict(spec.config)  # retention and cleanup kept


def test_a_topic_of_one_replica_takes_no_replica_settings():
    # a single broker refuses min.insync.replicas above its replication factor at every append
    for spec in ALL_TOPICS:
        assert topic_config(spec, replication_factor=1) == dict(spec.config)
