"""Times named in a query become the periods of created_at a search lifts."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from projections.time_expressions import Period, periods

REF = datetime(2023, 6, 15, 14, 30, tzinfo=UTC)  # a Thursday


def d(y: int, m: int, day: int) -> datetime:
    return datetime(y, m, day, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What did she share with her group in August 2022?", Period(d(2022, 8, 1), d(2022, 9, 1))),
        ("What idea did he have on 9 February, 2023?", Period(d(2023, 2, 9), d(2023, 2, 10))),
        ("Which city did he recommend on January 5th 2024?", Period(d(2024, 1, 5), d(2024, 1, 6))),
        ("what happened on 2023-05-08", Period(d(2023, 5, 8), d(2023, 5, 9))),
        ("Which country were they visiting in 2010?", Period(d(2010, 1, 1), d(2011, 1, 1))),
        ("What deal did John get in December?", Period(d(2022, 12, 1), d(2023, 1, 1))),  # the latest December
        ("what did we cook in June", Period(d(2023, 6, 1), d(2023, 7, 1))),
        ("where did she go last May", Period(d(2023, 5, 1), d(2023, 6, 1))),
        ("and last June?", Period(d(2022, 6, 1), d(2022, 7, 1))),  # "last" June is before this month
        ("what did you write yesterday", Period(d(2023, 6, 14), d(2023, 6, 15))),
        ("the book he finished last week", Period(d(2023, 6, 5), d(2023, 6, 12))),
        ("plans made this month", Period(d(2023, 6, 1), d(2023, 7, 1))),
        ("what happened last year", Period(d(2022, 1, 1), d(2023, 1, 1))),
        ("the trip three weeks ago", Period(d(2023, 5, 18), d(2023, 6, 1))),
        ("a party on 3 March", Period(d(2023, 3, 3), d(2023, 3, 4))),
        ("what did I do in the past week", Period(d(2023, 6, 8), d(2023, 6, 16))),  # up to today, not the
        ("over the Past month", Period(d(2023, 5, 16), d(2023, 6, 16))),  # calendar period before this one
        ("books read in the past year", Period(d(2022, 6, 15), d(2023, 6, 16))),
    ],
)
def test_a_named_time_becomes_the_period_it_points_at(query, expected):
    assert periods(query, REF) == [expected]


def test_several_times_come_in_the_order_they_are_named_and_a_span_is_read_once():
    assert periods("between 9 May 2023 and June 2023", REF) == [
        Period(d(2023, 5, 9), d(2023, 5, 10)),
        Period(d(2023, 6, 1), d(2023, 7, 1)),
    ]


@pytest.mark.parametrize(
    "query",
    [
        "What books has Tim read?",
        "You may want to rest",
        "Room 2022 is booked",
        "She said 10 times no",
        "What did they march for?",
    ],
)
def test_a_query_that_names_no_time_gives_no_period(query):
    assert periods(query, REF) == []


def test_an_impossible_day_falls_back_to_the_month_it_names():
    assert periods("What happened on 31 February 2023?", REF) == [Period(d(2023, 2, 1), d(2023, 3, 1))]


@pytest.mark.parametrize(
    ("query", "ref"),
    [
        ("what did we do 3000 years ago", REF),
        ("what did we do 9999 years ago", REF),
        ("what happened 99999999999 days ago", REF),
        ("9" * 5000 + " days ago", REF),  # past Python's limit on converting digits to an int
        ("what did you write yesterday", datetime(1, 1, 1, 1, tzinfo=UTC)),
        ("what happened last week", datetime(1, 1, 3, tzinfo=UTC)),
        ("what happened last month", datetime(1, 1, 3, tzinfo=UTC)),
        ("where did she go last May", datetime(1, 3, 1, tzinfo=UTC)),
        ("what did we do today", datetime(9999, 12, 31, 23, tzinfo=UTC)),
        ("plans made this year", datetime(9999, 6, 1, tzinfo=UTC)),
        ("plans made this month", datetime(9999, 12, 3, tzinfo=UTC)),
        ("what did we cook in December", datetime(9999, 12, 31, tzinfo=UTC)),
    ],
)
def test_a_time_outside_the_years_a_datetime_holds_names_no_period(query, ref):
    assert periods(query, ref) == []


def test_a_time_out_of_range_does_not_hide_the_others_named_with_it():
    assert periods("3000 years ago or in August 2022", REF) == [Period(d(2022, 8, 1), d(2022, 9, 1))]


@pytest.mark.parametrize(
    "query",
    ["fıve days ago", "FİVE DAYS AGO", "ſix days ago", "ſeven weeks ago", "thiſ week", "yeſterday", "paſt year"],
)
def test_a_time_word_that_only_folds_to_ascii_names_no_period_and_does_not_raise(query):
    # a dotless or dotted i and a long s fold to i and s under Unicode case folding: "fıve" raised a KeyError
    # (the search answered INTERNAL), "thiſ week" was read as last week, "yeſterday" as today
    assert periods(query, REF) == []


def test_a_no_break_space_between_time_words_still_separates_them():
    assert periods("the trip three\u00a0weeks ago", REF) == [Period(d(2023, 5, 18), d(2023, 6, 1))]
    assert periods("on 8\u00a0May 2023", REF) == [Period(d(2023, 5, 8), d(2023, 5, 9))]  # the day, not the month


def test_a_count_of_up_to_four_digits_is_still_read():
    # about 2020-09-18, give or take a third of it
    assert periods("the trip 1000 days ago", REF) == [Period(d(2019, 10, 21), d(2021, 8, 17))]


def _seconds_to_read(query: str) -> float:
    """The best of three runs: the least disturbed by whatever else the machine runs."""
    return min(_timed(periods, query, REF) for _ in range(3))


def _timed(f, *args) -> float:
    start = time.perf_counter()
    f(*args)
    return time.perf_counter() - start


@pytest.mark.parametrize("tail", [" " * 20_000, "\t" * 20_000, " ," + " " * 20_000])
def test_a_long_run_of_white_space_after_a_date_is_read_in_linear_time(tail):
    # the search runs on the API's event loop: a quadratic pattern took a second for half this query, so
    # about four for this one; read in linear time it takes a few milliseconds (the bound leaves room for
    # a loaded machine)
    assert _seconds_to_read("May 5" + tail) < 0.5


def test_a_query_naming_a_date_many_times_is_read_in_linear_time():
    query = ("May 5 " * 1_700)[:10_000]
    assert len(periods(query, REF)) == 1_666
    assert _seconds_to_read(query) < 0.3  # comparing each match with every one before took 0.4 s or more


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("May 5 , 2023", []),  # a year follows: not a day of this year
        ("May 5  10:30", []),  # a time of day after the day: not read as "May 5" alone
        ("May 5 ,, 2023", [Period(d(2023, 5, 5), d(2023, 5, 6))]),  # two commas: the day alone
        ("on May 5, and then", [Period(d(2023, 5, 5), d(2023, 5, 6))]),
    ],
)
def test_a_month_and_day_is_read_unless_a_year_or_a_time_follows(query, expected):
    assert periods(query, REF) == expected


def test_29_february_without_a_year_is_the_latest_leap_years():
    ref = datetime(2026, 12, 6, tzinfo=UTC)  # 2026 and 2025 have no 29 February: it named nothing
    (feb29,) = periods("what happened on Feb 29", ref)
    assert feb29.start == datetime(2024, 2, 29, tzinfo=UTC)
    assert periods("on 29 February", datetime(2024, 3, 1, tzinfo=UTC))[0].start.year == 2024


def test_days_months_and_years_are_those_of_the_askers_time_zone():
    from zoneinfo import ZoneInfo

    tokyo, new_york = ZoneInfo("Asia/Tokyo"), ZoneInfo("America/New_York")
    ref = datetime(2026, 12, 31, 16, 0, tzinfo=UTC)  # 1 January 2027, 01:00 in Tokyo; 11:00 on the 31st in New York
    assert periods("what did I eat yesterday", ref) == [Period(d(2026, 12, 30), d(2026, 12, 31))]
    (tokyo_yesterday,) = periods("what did I eat yesterday", ref, tokyo)
    assert tokyo_yesterday == Period(datetime(2026, 12, 31, tzinfo=tokyo), datetime(2027, 1, 1, tzinfo=tokyo))
    assert tokyo_yesterday.start == datetime(2026, 12, 30, 15, 0, tzinfo=UTC)  # midnight in Tokyo, in UTC
    (this_year,) = periods("plans made this year", ref, tokyo)
    assert this_year.start == datetime(2027, 1, 1, tzinfo=tokyo)
    # a zone with summer time: the day named is 23 hours long when the clocks go forward
    (spring_day,) = periods("on 2026-03-08", ref, new_york)
    assert spring_day.end.astimezone(UTC) - spring_day.start.astimezone(UTC) == timedelta(hours=23)
