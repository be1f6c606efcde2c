"""peerlog's database sessions read time in UTC whatever zone the server or the URL gives: in a zone west of
UTC a timestamp of 1 January of year 1 is before year 1, which psycopg refuses, so every read of its row
(a backdated message) failed."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text

from projections.db import async_engine, sync_engine

YEAR_ONE = "SELECT TIMESTAMPTZ '0001-01-01 00:30:00+00'"


def western(settings):
    url = settings.database.url
    zoned = url + ("&" if "?" in url else "?") + "options=-c%20TimeZone%3DAmerica/New_York"
    return settings.database.model_copy(update={"url": zoned})


def test_a_session_reads_in_utc_and_a_year_one_time_reads_whatever_zone_the_url_gives(settings):
    engine = sync_engine(western(settings))
    try:
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT current_setting('TimeZone')")) == "UTC"
            assert conn.scalar(text(YEAR_ONE)) == datetime(1, 1, 1, 0, 30, tzinfo=UTC)
    finally:
        engine.dispose()


async def test_the_apis_sessions_read_a_year_one_time_whatever_zone_the_url_gives(settings):
    engine = async_engine(western(settings))
    try:
        async with engine.connect() as conn:
            assert await conn.scalar(text(YEAR_ONE)) == datetime(1, 1, 1, 0, 30, tzinfo=UTC)
    finally:
        await engine.dispose()
