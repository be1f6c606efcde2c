"""Which cursor offsets a subscription refuses against the partitions' ends (no broker)."""

from __future__ import annotations

import pytest

from services.bus.subscription import check_ends
from services.errors import InvalidArgument

ENDS = {("p.sessions", 0): 7, ("p.sessions", 1): 0}


def test_a_cursor_at_or_before_each_partitions_end_is_accepted():
    check_ends({("p.sessions", 0): 7, ("p.sessions", 1): 0}, ENDS)
    check_ends({("p.sessions", 0): 3}, ENDS)


def test_a_cursor_past_a_partitions_end_is_refused_without_saying_where_the_end_is():
    with pytest.raises(InvalidArgument) as refused:
        check_ends({("p.sessions", 0): 5, ("p.sessions", 1): 1}, ENDS)
    message = str(refused.value)
    assert "offset 1 of 'p.sessions' partition 1, beyond the log's end" in message
    assert "re-created or restored" in message and "7" not in message  # other workspaces' volume stays theirs
