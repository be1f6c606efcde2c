"""A turn keeps the time it was recorded, however late it is sent: the provider stamps it when the turn is
recorded, since the server would stamp it when the write reaches it (at close, at the Nth turn, after an
outage). The stamp travels with the queued messages, so a retried send is the identical keyed request."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from unittest.mock import MagicMock

from peerlog_client.errors import Unavailable
from peerlog_client.memory.config import validate
from peerlog_client.memory.provider import MemoryProvider


def test_a_turn_sent_after_an_outage_keeps_its_time_and_its_retry_is_the_same_request(tmp_path):
    client = MagicMock()
    add_messages = client.workspace.return_value.session.return_value.add_messages
    add_messages.side_effect = [Unavailable("server down"), None, None]
    memory = MemoryProvider(validate([("t", {"writeFrequency": "turn"})]), directory=tmp_path, client=client)
    before = datetime.now(UTC)
    memory.record_turn("I keep bees", "How many hives?")  # its send fails: kept for the next one
    after = datetime.now(UTC)
    time.sleep(1.5)
    memory.record_turn("three hives", "Lovely!")  # the server is back: the first turn goes out now
    memory.close()
    (failed, retried, later) = add_messages.call_args_list
    assert retried == failed  # same messages, same stamps, same idempotency key: it cannot land twice
    stamps = [m.created_at for m in retried.args[0]]
    assert len(stamps) == 2 and None not in stamps and all(before <= stamp <= after for stamp in stamps)
    assert all(m.created_at >= after + timedelta(seconds=1) for m in later.args[0])
