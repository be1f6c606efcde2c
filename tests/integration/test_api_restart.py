"""An API server killed with a write produced but not committed: started again under its instance id, it
aborts that write at once, and the log's readers (the projector, the router) go on past it."""

from __future__ import annotations

import time

from services.bus.producer import EventLog
from services.bus.streams import open_transactions
from services.bus.topics import DIRECTORY
from tests.support.dead_api_log import killed_mid_write


def test_an_api_started_again_under_its_instance_id_aborts_the_write_it_left_open(settings):
    topic = DIRECTORY.full_name(settings.kafka.topic_prefix)
    left_open = killed_mid_write(settings, "api-a.0")
    assert len(left_open) == 1

    started = time.monotonic()
    again = EventLog(settings.kafka, instance="api-a.0")
    again.start()
    try:
        assert open_transactions(settings.kafka, topic, left_open, wait_s=5) == []
        assert time.monotonic() - started < 10  # the broker would have aborted it after 60 s
    finally:
        again.close()


def test_an_api_under_a_new_identity_leaves_the_dead_write_open(settings):
    """What the instance id changes: a server started again without it cannot end the dead transaction,
    and readers of that partition wait for the broker to abort it."""
    topic = DIRECTORY.full_name(settings.kafka.topic_prefix)
    left_open = killed_mid_write(settings, "api-b.0")
    again = EventLog(settings.kafka, instance="api-c.0")
    again.start()
    try:
        assert open_transactions(settings.kafka, topic, left_open) == left_open
    finally:
        again.close()
