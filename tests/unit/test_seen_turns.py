"""A narrow token's ListSessions counts the turns its peers saw from their membership periods alone."""

from __future__ import annotations

from services.api.reads import seen_turns


def period(after: int, until: int | None = None) -> dict:
    return {"joined_after_seq": after, "left_after_seq": until}


def test_the_turns_seen_are_those_after_each_join_up_to_its_leave_counted_once_where_periods_overlap():
    assert seen_turns([], 10) == 0
    assert seen_turns([period(0)], 10) == 10  # a member from the start, still there
    assert seen_turns([period(2, 5)], 10) == 3  # turns 3, 4, 5
    assert seen_turns([period(2, 5), period(8)], 10) == 5  # and 9, 10 after coming back
    # two peers of one token: alice 1-6, bob 4-10, each turn once
    assert seen_turns([period(0, 6), period(3)], 10) == 10
    assert seen_turns([period(3, 4), period(0, 6)], 10) == 6  # one period inside another
    assert seen_turns([period(10)], 10) == 0  # joined after the last turn
