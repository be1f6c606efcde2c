"""An API's log producer killed between producing a write and committing it.

    python -m tests.support.dead_api_log INSTANCE WORKSPACE   (settings from PEERLOG_* in the environment)

Prints "open" once the write's records are on the broker, in a transaction that is never committed."""

from __future__ import annotations

import sys
import time

from confluent_kafka import Producer

from services.bus.producer import EventLog
from services.bus.streams import open_transactions
from services.bus.topics import DIRECTORY
from services.events import ProducerInfo, WorkspaceCreated
from services.settings import Settings
from tests.support.processes import first_line_then_kill


class Stuck(EventLog):
    """Produces, flushes, and never commits: the process is killed there."""

    def _commit(self, producer: Producer, unanswered=None) -> None:
        producer.flush(30)
        print("open", flush=True)
        time.sleep(600)


def main(instance: str, workspace: str) -> None:
    log = Stuck(Settings().kafka, instance=instance)
    log.start()
    log.submit([WorkspaceCreated(workspace_id=workspace, producer=ProducerInfo(component="test", version="0"))])
    time.sleep(600)


def killed_mid_write(settings, instance: str) -> list[int]:
    """The partitions a SIGKILLed API process left a transaction open on."""
    assert first_line_then_kill(settings, "tests.support.dead_api_log", instance, "w-killed").strip() == "open"
    return open_transactions(
        settings.kafka, DIRECTORY.full_name(settings.kafka.topic_prefix), range(settings.kafka.partitions)
    )


if __name__ == "__main__":
    main(*sys.argv[1:3])
