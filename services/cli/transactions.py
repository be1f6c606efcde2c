"""`peerlog topics abort-open`: end a transaction the broker lost track of (a hanging transaction).

A transaction left open on a partition holds every read_committed reader of it at its first record: the
projector, the processors, a runner restoring its state. The broker aborts a dead producer's transaction
after transaction.timeout.ms, and a producer started again under the same transactional id at once; but
seen once in the chaos bench, a transaction written a second before the broker's SIGKILL stayed open after
both (README, chaos). Kafka's own kafka-transactions command can abort it, given the offset where it
starts: this runs that command (TransactionsCommand, from the jars `make jars` fetches) with the offset
read from the partition, and only for a transaction older than the timeout, which no live producer holds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from infra.kafka.broker import ensure_jars
from services.bus.admin import partitions_of
from services.bus.settings import SASL_PROTOCOLS, KafkaSettings
from services.bus.streams import first_open_record, open_transactions


@dataclass(frozen=True)
class Outcome:
    ok: bool  # aborted, or nothing was open
    message: str


def abort_open(kafka: KafkaSettings, topic: str, partition: int, min_age_s: float) -> Outcome:
    """Abort the oldest transaction open on `topic`[`partition`] if it began at least `min_age_s` ago."""
    first = first_open_record(kafka, topic, partition)
    if first is None:
        return Outcome(True, f"no transaction is open on {topic}[{partition}]")
    age_s = time.time() - first.timestamp()[1] / 1000
    if age_s < min_age_s:
        return Outcome(
            False,
            f"the transaction open on {topic}[{partition}] from offset {first.offset()} began {age_s:.0f} s ago, "
            f"less than {min_age_s:.0f} s: its producer may still end it",
        )
    _transactions_command(
        kafka, "abort", "--topic", topic, "--partition", str(partition), "--start-offset", str(first.offset())
    )
    if open_transactions(kafka, topic, [partition], wait_s=10):
        return Outcome(False, f"a transaction is still open on {topic}[{partition}] after the abort")
    return Outcome(
        True, f"aborted the transaction open on {topic}[{partition}] from offset {first.offset()} ({age_s:.0f} s old)"
    )


def abort_open_anywhere(kafka: KafkaSettings, topic: str, min_age_s: float) -> list[Outcome]:
    """abort_open for every partition of `topic` with a transaction open: `__consumer_offsets` among
    others, where a transaction the broker lost track of leaves its input offsets pending, and a runner
    then waits for them to become stable ("the assigned partitions' offsets did not become stable")."""
    open_now = open_transactions(kafka, topic, partitions_of(kafka, topic))
    return [abort_open(kafka, topic, p, min_age_s) for p in open_now]


class CommandFailed(RuntimeError):
    """Kafka's transactions command could not run, or failed: what the operator is told, in one line."""


def _transactions_command(kafka: KafkaSettings, *args: str) -> None:
    java = shutil.which("java")
    if java is None:
        raise CommandFailed("java not found on PATH; Kafka's transactions command needs it (run this where java is)")
    cmd = [java, "-cp", f"{ensure_jars()}/*", "org.apache.kafka.tools.TransactionsCommand"]
    # the credentials go in a file only this user can read, never on a command line `ps` shows
    with tempfile.TemporaryDirectory(prefix="peerlog-kafka-") as private:
        security = _command_config(kafka, Path(private))
        try:
            done = subprocess.run(
                [*cmd, "--bootstrap-server", kafka.bootstrap_servers, *security, *args],
                capture_output=True,
                text=True,
                timeout=120,
            )
        except subprocess.TimeoutExpired:
            raise CommandFailed(
                f"kafka-transactions {' '.join(args)} did not finish in 120 s; is the broker up?"
            ) from None
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise CommandFailed(f"kafka-transactions {' '.join(args)} failed: {last}")


def _command_config(kafka: KafkaSettings, private: Path) -> list[str]:
    """The --command-config option that gives Kafka's Java tools the settings' security, written in the
    directory `private` (owner-only); none for a PLAINTEXT broker."""
    if kafka.security_protocol == "PLAINTEXT":
        return []
    lines = (f"{key}={_escaped(value)}\n" for key, value in java_client_properties(kafka, private).items())
    path = _write_private(private / "command.properties", "".join(lines))
    return ["--command-config", str(path)]


LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def java_client_properties(kafka: KafkaSettings, private: Path) -> dict[str, str]:
    """The Java client's names for what KafkaSettings.client_config gives librdkafka. The Java client takes
    its credentials as a JAAS line and its client certificate as one PEM file holding key and chain (the
    key in PKCS#8), which is written in `private`."""
    props = {"security.protocol": kafka.security_protocol}
    if kafka.security_protocol in SASL_PROTOCOLS:
        user, password = _jaas_quoted(kafka.sasl_username), _jaas_quoted(kafka.sasl_password.get_secret_value())
        props["sasl.mechanism"] = str(kafka.sasl_mechanism)
        props["sasl.jaas.config"] = (
            f'{LOGIN_MODULES[str(kafka.sasl_mechanism)]} required username="{user}" password="{password}";'
        )
    if kafka.ssl_ca_location is not None:
        props |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(kafka.ssl_ca_location)}
    if kafka.ssl_certificate_location is not None and kafka.ssl_key_location is not None:
        pem = kafka.ssl_key_location.read_text() + kafka.ssl_certificate_location.read_text()
        keystore = _write_private(private / "client.pem", pem)
        props |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}
    return props


def _jaas_quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _escaped(value: str) -> str:
    """`value` as a .properties file must hold it: there a backslash starts an escape and a newline a new
    property."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _write_private(path: Path, text: str) -> Path:
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(text)
    return path
