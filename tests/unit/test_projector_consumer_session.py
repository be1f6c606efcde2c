"""A SIGKILLed projector's replacement gets its partitions within 10 s, not librdkafka's default 45 s.

Found by tests/bench/chaos.py: after each projector kill, projection (and every keyed AddMessages,
which waits for the projector) stalled 45 s, the dead member's session timeout."""

from projections.projector import consumer_config
from services.settings import Settings


def test_the_projector_consumer_session_expires_within_ten_seconds():
    config = consumer_config(Settings(), "peerlog.projector")
    assert config["session.timeout.ms"] <= 10_000
    assert config["heartbeat.interval.ms"] * 3 <= config["session.timeout.ms"]
