"""`peerlog topics abort-open`: a transaction left open on a partition is aborted through Kafka's own
transactions command, and only once it is older than the age asked for."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaException, Producer, TopicPartition

from services.bus.admin import create_topics
from services.bus.streams import open_transactions
from services.bus.topics import DIRECTORY, SESSIONS
from services.cli.transactions import abort_open, abort_open_anywhere
from tests.support.dead_api_log import killed_mid_write
from tests.support.dead_runner import runner as idle_runner
from tests.support.processes import first_line_then_kill, settings_env


def test_a_transaction_left_open_by_a_dead_producer_is_aborted_and_its_partition_read_again(settings):
    topic = DIRECTORY.full_name(settings.kafka.topic_prefix)
    [partition] = killed_mid_write(settings, "api-d.0")

    outcome = abort_open(settings.kafka, topic, partition, min_age_s=0)

    assert outcome.ok, outcome.message
    assert "aborted the transaction" in outcome.message
    assert open_transactions(settings.kafka, topic, [partition]) == []


def test_a_transaction_younger_than_the_age_asked_for_is_left_to_its_producer(settings):
    topic = DIRECTORY.full_name(settings.kafka.topic_prefix)
    [partition] = killed_mid_write(settings, "api-e.0")

    outcome = abort_open(settings.kafka, topic, partition, min_age_s=3600)

    assert not outcome.ok
    assert "its producer may still end it" in outcome.message
    assert open_transactions(settings.kafka, topic, [partition]) == [partition]


def test_a_partition_with_no_open_transaction_is_left_alone(settings):
    topic = DIRECTORY.full_name(settings.kafka.topic_prefix)
    written = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers})
    written.produce(topic, b"a record outside any transaction", partition=0)
    assert written.flush(30) == 0

    outcome = abort_open(settings.kafka, topic, 0, min_age_s=0)
    assert outcome.ok and "no transaction is open" in outcome.message


def test_input_offsets_a_dead_transaction_left_pending_are_released(settings):
    """A runner waits for its group's offsets to be stable before it restores; a transaction that is never
    ended leaves them pending (on `__consumer_offsets`) until it is aborted."""
    probe = idle_runner(settings)
    create_topics(settings.kafka, (probe.changelog,))
    assert first_line_then_kill(settings, "tests.support.dead_runner", "").startswith("open")
    group = Consumer({**probe._consumer_config(), "group.id": probe.group})
    inputs = [TopicPartition(SESSIONS.full_name(settings.kafka.topic_prefix), p) for p in range(3)]
    try:
        with pytest.raises(KafkaException):  # pending: not readable by a read_committed member
            group.committed(inputs, timeout=3)

        outcomes = abort_open_anywhere(settings.kafka, "__consumer_offsets", min_age_s=0)

        assert outcomes and all(o.ok for o in outcomes), [o.message for o in outcomes]
        assert [tp.offset for tp in group.committed(inputs, timeout=10)] == [OFFSET_INVALID] * 3
    finally:
        group.close()


def test_the_command_aborts_every_old_enough_transaction_of_a_topic(settings):
    from typer.testing import CliRunner

    from services.cli.main import app

    topic = DIRECTORY.full_name(settings.kafka.topic_prefix)
    [partition] = killed_mid_write(settings, "api-f.0")
    args = ["topics", "abort-open", topic, "--min-age-s", "0"]

    result = CliRunner().invoke(app, args, env=settings_env(settings))

    assert result.exit_code == 0, result.output
    assert f"aborted the transaction open on {topic}[{partition}]" in result.output
    assert open_transactions(settings.kafka, topic, [partition]) == []
