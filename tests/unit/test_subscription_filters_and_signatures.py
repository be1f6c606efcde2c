"""The pure parts of Subscribe and webhooks: which record keys a workspace's filter takes, which cursors
are refused, and the delivery signature (no broker, no server)."""

from __future__ import annotations

import pytest

from services.bus.subscription import Filter, check_cursor, check_partitions
from services.errors import InvalidArgument
from services.webhooks.signing import signature, verify


def test_a_filter_takes_its_workspace_keys_only_not_a_workspace_whose_id_starts_the_same():
    f = Filter("w")
    assert f.wants_key(b"w") and f.wants_key(b"w/s") and f.wants_key(b"w/alice/bob")
    assert not f.wants_key(b"w2/s") and not f.wants_key(b"ww") and not f.wants_key(None)


def test_unknown_event_types_are_refused_by_name():
    with pytest.raises(InvalidArgument, match="MessageSent"):
        Filter("w", frozenset({"MessageSent"}))


def test_a_cursor_may_name_only_log_topic_partitions_at_offsets_from_zero():
    topics = ["p.sessions"]
    check_cursor({("p.sessions", 0): 0, ("p.sessions", 2): 17}, topics)
    for bad in ({("p.other", 0): 0}, {("p.sessions", -1): 0}, {("p.sessions", 0): -5}):
        with pytest.raises(InvalidArgument):
            check_cursor(bad, topics)


def test_a_cursor_naming_a_partition_its_topic_does_not_have_is_refused():
    partitions = [("p.sessions", 0), ("p.sessions", 1), ("p.peers", 0)]
    check_partitions({("p.sessions", 1): 4, ("p.peers", 0): 0}, partitions)
    with pytest.raises(InvalidArgument, match="p.sessions/999, which does not exist: 'p.sessions' has 2"):
        check_partitions({("p.sessions", 0): 0, ("p.sessions", 999): 5}, partitions)
    with pytest.raises(InvalidArgument, match="'p.other' has 0"):  # a log topic not created here
        check_partitions({("p.other", 0): 0}, partitions)


def test_a_signature_verifies_only_with_its_secret_body_and_a_recent_timestamp():
    header = signature(b"k", 1_700_000_000, b'{"a":1}')
    assert header.startswith("t=1700000000,v1=") and len(header.split("v1=")[1]) == 64
    assert verify(b"k", header, b'{"a":1}', now=1_700_000_100)
    assert not verify(b"other", header, b'{"a":1}', now=1_700_000_100)
    assert not verify(b"k", header, b'{"a":2}', now=1_700_000_100)
    assert not verify(b"k", header, b'{"a":1}', now=1_700_000_000 + 301)
    assert not verify(b"k", "garbage", b'{"a":1}', now=1_700_000_000)


@pytest.mark.parametrize("header", ["t=1700000000,v1=\u00e9", "t=" + "9" * 400 + ",v1=ab", "t=,v1=", "t=1e9,v1=ab"])
def test_a_forged_signature_of_any_form_is_refused_not_raised(header):
    # a receiver's handler calls verify on whatever arrives: raising answered the forger with a 500
    assert verify(b"k", header, b'{"a":1}', now=1_700_000_000) is False
