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

import shutil
import subprocess
import time
from dataclasses import dataclass

from infra.kafka.broker import ensure_jars
from services.bus.admin import partitions_of
from services.bus.settings import KafkaSettings
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
    try:
        done = subprocess.run(
            [*cmd, "--bootstrap-server", kafka.bootstrap_servers, *args], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        raise CommandFailed(f"kafka-transactions {' '.join(args)} did not finish in 120 s; is the broker up?") from None
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise CommandFailed(f"kafka-transactions {' '.join(args)} failed: {last}")
