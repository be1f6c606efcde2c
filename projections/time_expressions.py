"""Times named in a search query, as the periods of `created_at` they point at.

"in 2022", "May 2023", "8 May, 2023", "May 8th 2023", "2023-05-08", "in December", "last May",
"yesterday", "last week", "three days ago", "this month": each becomes a half-open [start, end) range.
Expressions without a year or relative to now ("last May", "two weeks ago") are resolved against a
reference time: the search's upper time bound when it has one, else now. Days, months and years are
those of the asker's time zone (UTC unless the request names one): "yesterday" asked at 01:00 in Tokyo
is the day before in Tokyo, not in London. The search then lifts the
messages sent in those periods (message_search.TIME_BOOST) instead of filtering by them: a question may
name a time that is not when the answer was said ("what did she plan for June?").
Pure: no clock is read here, the caller passes the reference.
"""

from __future__ import annotations

import bisect
import calendar
import re
import string
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from services.events.times import in_zone

MONTHS = {
    name: i + 1
    for i, name in enumerate(
        (
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        )
    )
}
MONTHS |= {name[:3]: i for name, i in list(MONTHS.items())} | {"sept": 9}
NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a few": 3,
}
UNITS = {"day": 1, "week": 7, "month": 30, "year": 365}

_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
# a count of at most four digits: "9999 years ago" is already before year 1, and a longer one is a
# number in the text (an id, an amount) rather than a time
_NUMBER = r"(?P<n>\d{1,4}|" + "|".join(sorted(NUMBERS, key=len, reverse=True)) + r")"
# most specific first: a span a pattern has taken is not read again by a later one
PATTERNS = (
    ("iso", rf"\b{_YEAR}-(?P<mon>[01]\d)-(?P<day>[0-3]\d)\b"),
    ("day_month_year", rf"\b{_DAY}(?:\s+of)?\s+{_MONTH},?\s+{_YEAR}\b"),
    ("month_day_year", rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b"),
    ("month_year", rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b"),
    ("day_month", rf"\b{_DAY}(?:\s+of)?\s+{_MONTH}\b"),
    # not "May 5, 2023" nor "May 5 10:30". `(?:,\s*)?`, not `,?\s*`: the same strings, but two runs of
    # white space side by side split n spaces in n² ways, a second of CPU for a long query
    ("month_day", rf"\b{_MONTH}\s+{_DAY}\b(?!\s*(?:,\s*)?\d|\s*:)"),
    ("ago", rf"\b{_NUMBER}\s+(?P<unit>day|week|month|year)s?\s+ago\b"),
    ("last_month_name", rf"\blast\s+{_MONTH}\b"),
    ("relative", r"\b(?P<which>last|this|past|previous)\s+(?P<unit>week(?:end)?|month|year)\b"),
    ("day_word", r"\b(?P<word>yesterday|today|tonight)\b"),
    ("year", rf"\b(?:in|during|of|since|from|by|throughout)\s+{_YEAR}\b"),
    ("month", rf"\b(?:in|during|of|early|late|mid|beginning of|end of)\s+{_MONTH}\b"),
)
# The patterns are lower case and the query is matched with A-Z lowered: re.IGNORECASE folds Unicode look-alikes
# too ("fıve" with a dotless i matched "five", "ſix" with a long s "six"), words the tables do not hold. re.ASCII
# would also drop Unicode spaces and digits ("8\u00a0May 2023"); lowering A-Z alone keeps them and every span.
_COMPILED = tuple((kind, re.compile(p)) for kind, p in PATTERNS)
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


@dataclass(frozen=True)
class Period:
    start: datetime
    end: datetime  # exclusive


def _day(year: int, month: int, day: int, zone: tzinfo) -> Period | None:
    try:
        start = datetime(year, month, day, tzinfo=zone)
    except ValueError:
        return None  # "31 February": no such day; "February 2023" inside it may still be read
    return Period(start, start + timedelta(days=1))


def _month(year: int, month: int, zone: tzinfo) -> Period:
    start = datetime(year, month, 1, tzinfo=zone)
    return Period(start, datetime(year + month // 12, month % 12 + 1, 1, tzinfo=zone))


def _year(year: int, zone: tzinfo) -> Period:
    return Period(datetime(year, 1, 1, tzinfo=zone), datetime(year + 1, 1, 1, tzinfo=zone))


def _latest_year(month: int, day: int, ref: datetime, strictly_before_month: bool = False) -> int:
    """The year of the latest `month`/`day` not after `ref` (before `ref`'s month when asked). For 29
    February, the latest leap year: in another year there is no such day."""
    if strictly_before_month:
        return ref.year if month < ref.month else ref.year - 1
    year = ref.year if (month, day) <= (ref.month, ref.day) else ref.year - 1
    while (month, day) == (2, 29) and not calendar.isleap(year) and year > 1:
        year -= 1
    return year


def _count(n: str) -> int | None:
    return int(n) if n.isdigit() else NUMBERS.get(n)


def _ago(n: str, unit: str, ref: datetime) -> Period | None:
    """The days around `n` units before `ref` ("two weeks ago" is about then, give or take a third of it); None
    for a word the tables do not hold."""
    count, unit_days = _count(n), UNITS.get(unit)
    if count is None or unit_days is None:
        return None
    days = count * unit_days
    centre = ref.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=days)
    slack = timedelta(days=max(1, days // 3))
    return Period(centre - slack, centre + slack)


def _relative(which: str, unit: str, ref: datetime) -> Period:
    today = ref.replace(hour=0, minute=0, second=0, microsecond=0)
    if which == "past" and unit in UNITS:
        # "the past week" is the seven days up to today, where "last week" is the calendar week before this
        # one: on a Sunday that was 8-13 days ago, and the six latest days were left out
        return Period(today - timedelta(days=UNITS[unit]), today + timedelta(days=1))
    if unit.startswith("week"):
        monday = today - timedelta(days=today.weekday())
        start = monday if which == "this" else monday - timedelta(days=7)
        return Period(start, start + timedelta(days=7))
    if unit == "month":
        if which == "this":
            return _month(today.year, today.month, ref.tzinfo)
        return _month(today.year - (today.month == 1), (today.month - 2) % 12 + 1, ref.tzinfo)
    return _year(today.year if which == "this" else today.year - 1, ref.tzinfo)


def _period(kind: str, g: dict[str, str], ref: datetime) -> Period | None:  # noqa: PLR0911 - one per kind
    """The period of one match, in `ref`'s time zone."""
    zone = ref.tzinfo
    month = MONTHS.get((g.get("month") or "").rstrip("."), 0)
    if kind == "iso":
        return _day(int(g["year"]), int(g["mon"]), int(g["day"]), zone)
    if kind in ("day_month_year", "month_day_year"):
        return _day(int(g["year"]), month, int(g["day"]), zone)
    if kind == "month_year":
        return _month(int(g["year"]), month, zone)
    if kind in ("day_month", "month_day"):
        return _day(_latest_year(month, int(g["day"]), ref), month, int(g["day"]), zone)
    if kind == "ago":
        return _ago(g["n"], g["unit"], ref)
    if kind == "last_month_name":
        return _month(_latest_year(month, 1, ref, strictly_before_month=True), month, zone)
    if kind == "relative":
        return _relative(g["which"], g["unit"], ref)
    if kind == "day_word":
        today = ref.replace(hour=0, minute=0, second=0, microsecond=0)
        return (
            Period(today - timedelta(days=1), today)
            if g["word"] == "yesterday"
            else Period(today, today + timedelta(days=1))
        )
    if kind == "year":
        return _year(int(g["year"]), zone)
    return _month(_latest_year(month, 1, ref), month, zone)  # "in December": the latest December begun by ref


def _period_in_range(kind: str, g: dict[str, str], ref: datetime) -> Period | None:
    """`_period`, or None when the period runs outside the years 1–9999 a datetime holds ("3000 years
    ago", "yesterday" from a reference on 1 January of year 1): no period, not a failed search."""
    try:
        return _period(kind, g, ref)
    # date arithmetic's range errors, and a word missing from a table as a last guard: the lookups use .get()
    except (OverflowError, ValueError, LookupError):
        return None


def periods(query: str, ref: datetime, zone: tzinfo = UTC) -> list[Period]:
    """The periods `query` names, in the order they appear, as days, months and years of `zone`; none
    when it names no time."""
    ref, query = in_zone(ref, zone), query.translate(_ASCII_LOWER)
    taken: list[tuple[int, int]] = []  # disjoint spans, in order
    found: list[tuple[int, Period]] = []
    for kind, pattern in _COMPILED:
        for m in pattern.finditer(query):
            if _overlaps(taken, m.span()):
                continue
            period = _period_in_range(kind, {k: v for k, v in m.groupdict().items() if v}, ref)
            if period is not None:
                bisect.insort(taken, m.span())
                found.append((m.start(), period))
    return [p for _, p in sorted(found, key=lambda f: f[0])]


def _overlaps(taken: list[tuple[int, int]], span: tuple[int, int]) -> bool:
    """Whether `span` overlaps one of the disjoint, ordered spans `taken`: only the last one starting
    before it ends can. Checking every span cost a second for a query naming a date a thousand times."""
    before = bisect.bisect_left(taken, (span[1],))
    return before > 0 and taken[before - 1][1] > span[0]
