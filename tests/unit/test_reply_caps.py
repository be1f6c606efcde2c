"""What a reply shows of things that grow with use, so that it stays readable by a default client."""

from __future__ import annotations

from datetime import UTC, datetime

from services.api import convert


def test_a_dead_lettered_batch_lists_its_first_100_message_ids_and_counts_them_all():
    row = {
        "batch_id": "b",
        "observer_id": "a",
        "observed_id": "b",
        "message_ids": [f"m{i}" for i in range(1_024)],
        "error": "model down",
        "finished_at": datetime.now(UTC),
    }
    shown = convert.dead_lettered_batch(row)
    assert list(shown.message_ids) == [f"m{i}" for i in range(100)] and shown.message_count == 1_024


def test_a_session_shows_every_current_membership_before_the_newest_past_ones():
    periods = [{"peer_id": f"p{i}", "left_at": None if i % 10 == 0 else i} for i in range(50)]
    shown = convert.shown_memberships(periods, 8)
    assert [p["peer_id"] for p in shown] == ["p0", "p10", "p20", "p30", "p40", "p47", "p48", "p49"]
    assert [p["peer_id"] for p in convert.shown_memberships(periods, 3)] == ["p0", "p10", "p20"]
