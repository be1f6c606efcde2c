"""A time as a reader in some zone sees it."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo


def in_zone(when: datetime, zone: tzinfo) -> datetime:
    """`when` in `zone`, or in UTC where the zone's offset would carry it past the years a datetime holds
    (a backfill dated 1 January of year 1 read west of UTC, 31 December 9999 read east of it)."""
    try:
        return when.astimezone(zone)
    except (OverflowError, ValueError):
        pass
    try:
        return when.astimezone(UTC)
    except (OverflowError, ValueError):  # its own offset already holds it at the edge: shown as it came
        return when


def day(when: datetime) -> str:
    """`when`'s date as YYYY-MM-DD, its year in four digits: "%Y" writes year 1 as "1" (glibc)."""
    return when.date().isoformat()


def minute(when: datetime) -> str:
    """`when` as YYYY-MM-DD HH:MM."""
    return f"{day(when)} {when:%H:%M}"
