"""How Chat's tools show a message to the model."""

from __future__ import annotations

from datetime import UTC, datetime

from services.toolloop.memory import message_line

ROW = {
    "message_id": "m1",
    "session_id": "s",
    "peer_id": "u-7f3a",
    "content": "I finished the quilt",
    "created_at": datetime(2026, 1, 12, 9, 30, tzinfo=UTC),
}


def test_a_message_line_names_its_author_by_display_name_beside_its_id():
    assert message_line({**ROW, "author_name": "Maria Lopez"}) == (
        "[msg:m1] (2026-01-12 09:30 UTC, session s) Maria Lopez (u-7f3a): I finished the quilt"
    )


def test_a_message_line_of_an_author_without_a_name_shows_its_id():
    assert message_line({**ROW, "author_name": None}).endswith(") u-7f3a: I finished the quilt")
    assert message_line(ROW).endswith(") u-7f3a: I finished the quilt")
