"""A broker that asks for SASL credentials: peerlog's clients, given them in PEERLOG_KAFKA_*, write and read
the log, and a client without them reads nothing. And the dev broker keeps its data to its owner."""

from __future__ import annotations

import stat
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from infra.kafka.broker import KafkaBroker
from services.bus.admin import create_topics
from services.bus.producer import EventLog
from services.bus.settings import KafkaSettings
from services.bus.streams import open_transactions, to_the_end
from services.bus.topics import DIRECTORY
from services.cli.transactions import abort_open
from services.events import ProducerInfo, WorkspaceCreated
from services.settings import Settings
from tests.support.dead_api_log import killed_mid_write

pytestmark = pytest.mark.timeout(300)
PASSWORD = "peerlog-sasl-test"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    kafka = KafkaBroker(tmp_path_factory.mktemp("kafka") / "sasl", sasl_users={"peerlog": PASSWORD})
    kafka.start()
    yield kafka
    kafka.kill()


@pytest.fixture
def kafka(broker: KafkaBroker) -> KafkaSettings:
    """peerlog's settings for the broker, with the right credentials and topics of their own."""
    settings = KafkaSettings(
        bootstrap_servers=broker.bootstrap_servers,
        topic_prefix=f"t{uuid.uuid4().hex[:10]}.",
        partitions=1,
        producer_pool_size=1,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="peerlog",
        sasl_password=PASSWORD,
    )
    create_topics(settings)
    return settings


def test_peerlog_with_the_right_credentials_appends_to_the_log_and_reads_it_back(kafka):
    log = EventLog(kafka, instance="sasl")
    log.start()
    try:
        log.append_sync([WorkspaceCreated(workspace_id="w-sasl", producer=ProducerInfo(component="test", version="0"))])
    finally:
        log.close()

    records = list(to_the_end(kafka, DIRECTORY.full_name(kafka.topic_prefix), timeout=30))

    assert len(records) == 1 and b"w-sasl" in records[0].value()


@pytest.mark.parametrize(
    "credentials",
    [
        {},
        {"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN", "sasl.username": "peerlog"}
        | {"sasl.password": "wrong"},
    ],
    ids=["none", "wrong-password"],
)
def test_a_client_without_the_credentials_cannot_read_the_log(kafka, credentials):
    topic = DIRECTORY.full_name(kafka.topic_prefix)
    log = EventLog(kafka, instance="sasl-secret")
    log.start()
    try:
        log.append_sync(
            [WorkspaceCreated(workspace_id="w-secret", producer=ProducerInfo(component="test", version="0"))]
        )
    finally:
        log.close()
    outsider = Consumer(
        {"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"outsider-{uuid.uuid4().hex}", **credentials}
    )
    try:
        with pytest.raises(KafkaException):
            outsider.list_topics(topic, timeout=5)
        outsider.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        read = [msg for msg in _poll_for(outsider, seconds=5) if msg.error() is None]
    finally:
        outsider.close()

    assert read == []


def test_abort_open_reaches_a_sasl_broker_through_kafkas_own_command(kafka):
    settings = Settings(kafka=kafka)
    topic = DIRECTORY.full_name(kafka.topic_prefix)
    [partition] = killed_mid_write(settings, "api-sasl.0")

    outcome = abort_open(kafka, topic, partition, min_age_s=0)

    assert outcome.ok and "aborted the transaction" in outcome.message, outcome.message  # Kafka's command ran
    assert open_transactions(kafka, topic, [partition]) == []


def test_the_dev_brokers_data_directory_is_readable_by_its_owner_only(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("dev") / "kafka"
    data_dir.mkdir(mode=0o755)  # what `peerlog dev up` made before
    data_dir.chmod(0o755)
    broker = KafkaBroker(data_dir)
    broker.start()
    try:
        mode = stat.S_IMODE(data_dir.stat().st_mode)
    finally:
        broker.kill()

    assert mode == 0o700, oct(mode)


def _poll_for(consumer: Consumer, seconds: float) -> list:
    messages, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        messages += consumer.consume(100, 0.2)
    return messages
