"""Ids (services.events.new_id): UUIDv7s that sort by creation and carry the clock's time, also when
many are made within one millisecond, as an AddMessages of 100 messages does."""

from __future__ import annotations

import time
import uuid


def _millis(text_id: str) -> int:
    return uuid.UUID(text_id).int >> 80


def test_ids_made_in_a_burst_are_unique_in_creation_order_and_not_ahead_of_the_clock():
    from services.events import new_id

    before = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(50_000)]
    after = time.time_ns() // 1_000_000
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(uuid.UUID(i).version == 7 for i in ids[:: len(ids) // 100])
    # an id made within a millisecond of another keeps that millisecond: the generator that moved
    # each one a millisecond ahead put the last of these 50 s in the future
    assert before <= _millis(ids[0]) and _millis(ids[-1]) <= after
