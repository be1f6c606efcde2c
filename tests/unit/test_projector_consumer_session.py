"""A SIGKILLed projector's replacement gets its partitions within 10 s, not librdkafka's default 45 s.

Found by tests/bench/chaos.py: after each projector kill, projection (and every keyed AddMessages,
which waits for the projector) stalled 45 s, the dead member's session timeout."""

from projections.projector import consumer_config
from services.settings import Settings


def test_the_projector_consumer_session_expires_within_ten_seconds():
    config = consumer_config(Settings(), "peerlog.projector")
    assert config["session.timeout.ms"] <= 10_000
    assert config["heartbeat.interval.ms"] * 3 <= config["session.timeout.ms"]


def test_a_projector_with_an_instance_id_is_a_static_member_of_its_group_and_one_without_is_not():
    assert "group.instance.id" not in consumer_config(Settings(), "peerlog.projector")
    static = consumer_config(Settings(), "peerlog.projector", "projector-1")
    assert static["group.instance.id"] == "projector-1"
