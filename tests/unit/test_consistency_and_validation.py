"""Consistency tokens and request checks, without a broker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.api import validation as v
from services.bus.consistency import ConsistencyToken, InvalidConsistencyToken
from services.errors import InvalidArgument


def test_a_token_keeps_the_highest_offset_per_partition_and_round_trips():
    token = ConsistencyToken.of([("peerlog.sessions", 1, 5), ("peerlog.sessions", 1, 9), ("peerlog.directory", 0, 2)])
    assert token.offsets == {("peerlog.sessions", 1): 9, ("peerlog.directory", 0): 2}
    assert ConsistencyToken.decode(token.encode()) == token
    merged = token.merge(ConsistencyToken.of([("peerlog.sessions", 1, 3), ("peerlog.sessions", 2, 1)]))
    assert merged.offsets[("peerlog.sessions", 1)] == 9 and merged.offsets[("peerlog.sessions", 2)] == 1


def test_topic_names_with_colons_survive_a_token_round_trip():
    token = ConsistencyToken.of([("a:b.sessions", 3, 7)])
    assert ConsistencyToken.decode(token.encode()) == token


@pytest.mark.parametrize("bad", ["garbage", "t:x:1", "t:1:y", ":1:2"])
def test_malformed_tokens_are_refused(bad):
    with pytest.raises(InvalidConsistencyToken):
        ConsistencyToken.decode(bad)


@pytest.mark.parametrize("ok", ["a", "A-z_09", "x" * 512])
def test_ids_within_the_pattern_pass(ok):
    assert v.check_id("peer_id", ok) == ok


@pytest.mark.parametrize("bad", ["", "a b", "a/b", "é", "x" * 513, "a\n"])
def test_ids_outside_the_pattern_are_refused_with_the_rule(bad):
    with pytest.raises(InvalidArgument, match="1–512 characters"):
        v.check_id("peer_id", bad)


def test_created_at_may_be_in_the_past_but_not_far_in_the_future():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    v.check_created_at(0, now - timedelta(days=3650), now)
    v.check_created_at(0, now + timedelta(minutes=5), now)
    with pytest.raises(InvalidArgument, match="future"):
        v.check_created_at(0, now + timedelta(days=1), now)


def test_page_size_defaults_and_caps():
    assert v.page_size(0) == 50
    assert v.page_size(1000) == 1000
    with pytest.raises(InvalidArgument):
        v.page_size(1001)


@pytest.mark.parametrize(
    "bad",
    [
        "peerlog.sessions:0:²",
        "peerlog.sessions:²:0",
        "peerlog.sessions:0:" + "9" * 5000,
        "peerlog.sessions:0:" + "9" * 20,
        "peerlog.se\x00ssions:0:1",
        "peerlog.sessions:0:1\x00",
    ],
)
def test_tokens_with_non_ascii_digits_oversized_numbers_or_nul_are_refused(bad):
    with pytest.raises(InvalidConsistencyToken) as refused:
        ConsistencyToken.decode(bad)
    assert len(str(refused.value)) < 200  # a 5,000-digit part is not echoed whole into a status header


def test_a_token_of_50000_parts_is_refused_before_it_is_parsed():
    with pytest.raises(InvalidConsistencyToken, match="more than 1024 parts"):
        ConsistencyToken.decode(",".join(["peerlog.sessions:0:1"] * 50_000))


def test_a_token_on_a_topic_the_metadata_does_not_list_yet_is_left_to_the_wait_not_refused():
    import asyncio
    import time

    from services.bus.log_ends import LogEnds
    from services.bus.settings import KafkaSettings
    from services.bus.topics import SESSIONS

    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1", topic_prefix="t.")
    ends = LogEnds(kafka, timeout_s=0.1)
    try:
        topic = SESSIONS.full_name(kafka.topic_prefix)
        # listed a moment ago, before the topic's leader was elected: the metadata held it with an error
        ends._partitions, ends._listed_at = {}, time.monotonic()
        assert asyncio.run(ends._partition_count(topic, 0)) is None
        ends._partitions = {topic: 3}
        assert asyncio.run(ends._partition_count(topic, 5)) == 3  # a partition the topic lacks is refused
    finally:
        ends.close()


@pytest.mark.parametrize("name", ["Mars/Base", "x" * 65, "a" * 5000, "a\x00b", "../../etc/passwd", "zone.tab", " "])
def test_a_time_zone_that_is_no_iana_name_is_invalid_argument_whatever_it_holds(name):
    with pytest.raises(InvalidArgument, match="IANA name"):
        v.time_zone("time_zone", name)


def test_a_time_zone_is_read_by_its_iana_name_and_empty_is_utc():
    assert v.time_zone("time_zone", "") is UTC
    assert str(v.time_zone("time_zone", "Asia/Tokyo")) == "Asia/Tokyo"
