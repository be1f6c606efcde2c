"""Timestamps a request carries must lie in Timestamp's range, or the call is INVALID_ARGUMENT."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from google.protobuf import timestamp_pb2

from peerlog.v1 import messages_pb2
from services.api import convert as c
from services.errors import InvalidArgument


def _with(seconds: int, nanos: int = 0) -> messages_pb2.NewMessage:
    return messages_pb2.NewMessage(created_at=timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos))


@pytest.mark.parametrize(
    "seconds, nanos",
    [
        (-62_135_596_801, 0),  # a second before year 1
        (253_402_300_800, 0),  # a second after 9999
        (2**62, 0),
        (0, -1),
        (0, 1_000_000_000),
    ],
)
def test_timestamps_out_of_range_are_invalid_argument(seconds, nanos):
    with pytest.raises(InvalidArgument, match="created_at .* not a valid timestamp"):
        c.from_ts(_with(seconds, nanos), "created_at")


def test_the_first_and_last_instants_of_the_range_are_accepted():
    assert c.from_ts(_with(-62_135_596_800), "created_at") == datetime(1, 1, 1, tzinfo=UTC)
    assert c.from_ts(_with(253_402_300_799, 999_999_999), "created_at").year == 9999
    assert c.from_ts(messages_pb2.NewMessage(), "created_at") is None


@pytest.mark.parametrize(
    "value",
    [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(2026, 12, 5, 12, 0, 1, 123_456, tzinfo=UTC),
        datetime(2026, 12, 5, 14, 0, 1, 5, tzinfo=timezone(timedelta(hours=2))),  # the same instant elsewhere
        datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2026, 6, 1, 8, 30),  # naive: local time
    ],
)
def test_a_time_answered_is_the_timestamp_protobuf_itself_would_make(value):
    expected = timestamp_pb2.Timestamp()
    expected.FromDatetime(value.astimezone(UTC))
    assert c.ts(value) == expected
