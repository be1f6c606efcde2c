"""`peerlog topics abort-open`: a transaction left open on a partition is aborted through Kafka's own
transactions command, and only once it is older than the age asked for."""

from __future__ import annotations

from confluent_kafka import Producer

from services.bus.streams import open_transactions
from services.bus.topics import DIRECTORY
from services.cli.transactions import abort_open
from tests.support.dead_api_log import killed_mid_write


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
