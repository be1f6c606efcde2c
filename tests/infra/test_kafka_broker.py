"""Proves the local Kafka broker (infra/kafka) gives peerlog the Kafka semantics it relies on.

One real broker (KRaft, 127.0.0.1) serves the whole module; each test uses its own topics.
The restart/kill tests run last because they bounce that broker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from infra.kafka import KafkaBroker

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    """One single-node broker for the module, in a temp data dir."""
    # A shorter broker session lets the kill test restart in ~6 s instead of ~13 s
    # (the controller refuses the new incarnation until the killed one's session expires).
    kafka = KafkaBroker(
        tmp_path_factory.mktemp("kafka"),
        properties={"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "1000"},
    )
    kafka.start()
    yield kafka
    kafka.stop()


@pytest.fixture(scope="module")
def admin(broker: KafkaBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(admin: AdminClient, name: str, partitions: int = 1, config: dict | None = None) -> str:
    future = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name]
    future.result(timeout=30)
    # CreateTopics answers once the controller has the topic; the broker learns it from the metadata log a
    # moment later, and a DescribeConfigs before that fails with UNKNOWN_TOPIC_OR_PART (seen under load).
    deadline = time.monotonic() + 30
    while True:
        meta = admin.list_topics(name, timeout=10).topics.get(name)
        parts = meta.partitions.values() if meta is not None and meta.error is None else ()
        if len(parts) == partitions and all(p.leader >= 0 for p in parts):
            return name
        assert time.monotonic() < deadline, f"topic {name} created but not in the broker's metadata"
        time.sleep(0.1)


def read_all(
    bootstrap: str, topic: str, expected: int, isolation: str = "read_committed", timeout: float = 30
) -> list[tuple[bytes | None, bytes | None]]:
    """Read partition 0 of topic from the start until its end offset (or `expected` records)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    records: list[tuple[bytes | None, bytes | None]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF and len(records) >= expected:
                    break
                continue
            records.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return records


def values(records: list[tuple[bytes | None, bytes | None]]) -> list[bytes | None]:
    return [value for _, value in records]


# --------------------------------------------------------------------------- broker basics


def test_broker_listens_on_loopback_and_reports_its_pid(broker: KafkaBroker) -> None:
    host, port = broker.bootstrap_servers.split(":")
    assert host == "127.0.0.1" and int(port) == broker.port
    assert broker.pid is not None
    assert broker.pid_file.read_text().strip() == str(broker.pid)


def test_broker_never_auto_creates_topics(broker: KafkaBroker, admin: AdminClient) -> None:
    missing = unique("never-created")
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "message.timeout.ms": 1000})
    errors: list[KafkaError] = []
    producer.produce(missing, b"x", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    assert missing not in admin.list_topics(timeout=10).topics


# --------------------------------------------------------------------------- producers


def test_idempotent_producer_writes_each_record_once_in_order(broker: KafkaBroker, admin: AdminClient) -> None:
    topic = create_topic(admin, unique("idempotent"))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True, "acks": "all"})
    sent = [f"event-{i}".encode() for i in range(50)]
    for value in sent:
        producer.produce(topic, value, key=b"agent-1")
    assert producer.flush(30) == 0

    assert values(read_all(broker.bootstrap_servers, topic, expected=len(sent))) == sent


def test_read_committed_consumer_never_sees_aborted_transaction(broker: KafkaBroker, admin: AdminClient) -> None:
    topic = create_topic(admin, unique("txn"))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": unique("txn-producer")})
    producer.init_transactions(30)
    for value, commit in [(b"committed-1", True), (b"aborted-1", False), (b"committed-2", True)]:
        producer.begin_transaction()
        producer.produce(topic, value)
        producer.flush(30)  # the aborted record must really reach the log before the abort
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    committed = values(read_all(broker.bootstrap_servers, topic, expected=2))
    everything = values(read_all(broker.bootstrap_servers, topic, expected=3, isolation="read_uncommitted"))

    assert committed == [b"committed-1", b"committed-2"]
    # Proves the broker stored the aborted record and filtered it, rather than never receiving it.
    assert everything == [b"committed-1", b"aborted-1", b"committed-2"]


# --------------------------------------------------------------------------- topic configs


def test_compacted_topic_keeps_only_latest_value_per_key(broker: KafkaBroker, admin: AdminClient) -> None:
    # Tiny segments and dirty ratio so the cleaner (checked every second) compacts at once.
    topic = create_topic(
        admin,
        unique("compacted"),
        config={"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"},
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(5):
        producer.produce(topic, str(i).encode(), key=b"memory-1")
    producer.flush(30)
    # Only closed segments are cleaned; later writes after segment.ms roll the earlier ones.
    for key in (b"memory-2", b"memory-3"):
        time.sleep(0.3)
        producer.produce(topic, b"0", key=key)
        producer.flush(30)

    deadline = time.monotonic() + 60
    while True:
        records = read_all(broker.bootstrap_servers, topic, expected=3, timeout=10)
        if [v for k, v in records if k == b"memory-1"] == [b"4"]:
            break
        assert time.monotonic() < deadline, f"not compacted: {records}"
        time.sleep(1)


def test_broker_accepts_compacted_and_infinite_retention_topic_configs(admin: AdminClient) -> None:
    compacted = create_topic(admin, unique("snapshots"), config={"cleanup.policy": "compact"})
    forever = create_topic(admin, unique("events"), config={"retention.ms": "-1", "retention.bytes": "-1"})

    resources = [ConfigResource("topic", compacted), ConfigResource("topic", forever)]
    described = {res.name: fut.result(30) for res, fut in admin.describe_configs(resources).items()}

    assert described[compacted]["cleanup.policy"].value == "compact"
    assert described[forever]["retention.ms"].value == "-1"
    assert described[forever]["cleanup.policy"].value == "delete"


# --------------------------------------------------------------------------- faust

FAUST_APP = textwrap.dedent(
    """
    import os
    import faust

    app = faust.App(
        os.environ["APP_ID"],
        broker="kafka://" + os.environ["BOOTSTRAP"],
        store="memory://",
        topic_partitions=1,
        topic_replication_factor=1,
        processing_guarantee="exactly_once",
        datadir=os.environ["DATADIR"],
        web_enabled=False,
    )
    source = app.topic(os.environ["SOURCE"], key_type=str, value_type=str)
    sink = app.topic(os.environ["SINK"], key_type=str, value_type=str)
    counts = app.Table("counts", default=int, partitions=1)

    @app.agent(source)
    async def count(stream):
        async for key, _value in stream.items():
            counts[key] += 1
            await sink.send(key=key, value=f"{key}={counts[key]}")

    if __name__ == "__main__":
        app.main()
    """
)


def test_faust_exactly_once_agent_processes_records_and_writes_table_changelog(
    broker: KafkaBroker, admin: AdminClient, tmp_path: Path
) -> None:
    app_id = unique("probe")
    source = create_topic(admin, unique("faust-in"))
    sink = create_topic(admin, unique("faust-out"))
    script = tmp_path / "faust_probe.py"
    script.write_text(FAUST_APP)
    env = dict(
        os.environ,
        APP_ID=app_id,
        BOOTSTRAP=broker.bootstrap_servers,
        DATADIR=str(tmp_path / "faust"),
        SOURCE=source,
        SINK=sink,
    )
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, str(script), "worker", "-l", "info"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            start_new_session=True,
        )
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for i in range(6):
            producer.produce(source, str(i).encode(), key=b"a" if i % 2 == 0 else b"b")
        producer.flush(30)

        # The sink is written inside faust's transactions: read_committed sees them once committed.
        out = values(read_all(broker.bootstrap_servers, sink, expected=6, timeout=120))
        changelog_topic = f"{app_id}-counts-changelog"
        changelog = read_all(broker.bootstrap_servers, changelog_topic, expected=6, timeout=30)
        changelog_cfg = admin.describe_configs([ConfigResource("topic", changelog_topic)])
        policy = next(iter(changelog_cfg.values())).result(30)["cleanup.policy"].value
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()

    log_text = log_path.read_text(errors="replace")
    assert sorted(out) == sorted(f'"{k}={n}"'.encode() for k in "ab" for n in (1, 2, 3)), log_text[-3000:]
    # Changelog keys are JSON-encoded by faust; values are the latest count per key.
    assert dict(changelog) == {b'"a"': b"3", b'"b"': b"3"}
    assert policy == "compact"
    assert "transactional producer" in log_text  # exactly_once really ran with transactions


# --------------------------------------------------------------------------- durability (bounce the broker: keep last)


def test_records_survive_a_broker_restart(broker: KafkaBroker, admin: AdminClient) -> None:
    topic = create_topic(admin, unique("durable"))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
    sent = [f"before-restart-{i}".encode() for i in range(20)]
    for value in sent:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    address, old_pid = broker.bootstrap_servers, broker.pid

    broker.restart()  # SIGTERM (controlled shutdown), then start on the same data dir and ports

    assert broker.bootstrap_servers == address
    assert broker.pid != old_pid
    assert values(read_all(broker.bootstrap_servers, topic, expected=len(sent))) == sent


def test_acknowledged_records_survive_a_broker_kill(broker: KafkaBroker, admin: AdminClient) -> None:
    topic = create_topic(admin, unique("crash"))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
    sent = [f"before-kill-{i}".encode() for i in range(20)]
    for value in sent:
        producer.produce(topic, value)
    assert producer.flush(30) == 0

    broker.kill()  # SIGKILL: no controlled shutdown, the log is recovered on start
    assert broker.pid is None
    broker.start()

    assert values(read_all(broker.bootstrap_servers, topic, expected=len(sent))) == sent
    # The broker still accepts writes after recovery.
    producer.produce(topic, b"after-kill")
    assert producer.flush(30) == 0
    assert values(read_all(broker.bootstrap_servers, topic, expected=len(sent) + 1))[-1] == b"after-kill"
