"""The stream processors' screen of keyed appends: the first append under a key passes, a later one
under it is skipped, and only the scope's recent keys are kept."""

from __future__ import annotations

from services.events.requests import RECENT_KEYS, KeyedRequest, screen


def request(key: str, request_id: str) -> KeyedRequest:
    return KeyedRequest(key=key, scope="w/s", fingerprint="f", request_id=request_id)


def test_every_event_of_the_first_append_passes_and_a_later_append_under_the_key_is_skipped():
    repeat, recent = screen(None, request("k", "first"))
    assert not repeat and recent is not None
    assert screen(recent, request("k", "first")) == (False, None)  # its second event: nothing to store
    assert screen(recent, request("k", "retry")) == (True, None)
    assert screen(recent, request("other", "retry"))[0] is False


def test_only_the_latest_keys_are_remembered():
    recent = None
    for i in range(RECENT_KEYS + 1):
        _, recent = screen(recent, request(f"k{i}", f"r{i}"))
    assert len(recent) == RECENT_KEYS
    assert screen(recent, request("k0", "again"))[0] is False  # forgotten: the projector still drops it
    assert screen(recent, request("k1", "again"))[0] is True
