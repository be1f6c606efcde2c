"""What a subscription (Subscribe, webhooks) delivers of a keyed write appended twice: the first append's
events, never a retry's copy, within the latest MOST_KEYS keys, in bounded memory (no broker)."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime

from services.bus.first_appends import MOST_KEYS, FirstAppends
from services.events import MessageAppended, ProducerInfo
from services.events.requests import KeyedRequest


def appended(message_id: str, request_id: str | None, key: str = "k", session: str = "s") -> MessageAppended:
    request = (
        None
        if request_id is None
        else KeyedRequest(key=key, scope=f"w/{session}", fingerprint="f", request_id=request_id)
    )
    return MessageAppended(
        workspace_id="w",
        session_id=session,
        message_id=message_id,
        peer_id="alice",
        content="hello",
        created_at=datetime.now(UTC),
        producer=ProducerInfo(component="test", version="1"),
        request=request,
    )


def test_every_message_of_the_first_append_is_delivered_and_none_of_a_retrys_copy():
    first = FirstAppends()
    assert [first.repeated(appended(m, "first")) for m in ("m1", "m2")] == [False, False]
    assert [first.repeated(appended(m, "retry")) for m in ("m3", "m4")] == [True, True]
    assert not first.repeated(appended("m1", "first"))  # the first append read again (a rewind) still passes


def test_the_same_key_in_another_session_and_writes_without_a_key_are_other_writes():
    first = FirstAppends()
    first.repeated(appended("m1", "first"))
    assert not first.repeated(appended("m2", "other", session="s2"))
    assert not first.repeated(appended("m3", None)) and not first.repeated(appended("m4", None))


def test_a_stream_remembers_its_latest_keys_only_and_forgets_the_oldest_first():
    first = FirstAppends(most=3)
    for key in ("k1", "k2", "k3", "k4"):
        first.repeated(appended("m", f"first-{key}", key=key))
    assert len(first) == 3
    assert not first.repeated(appended("m", "retry", key="k1"))  # forgotten: delivered, the bound's cost
    assert first.repeated(appended("m", "retry", key="k3"))


def test_a_full_screen_holds_little_memory_however_long_its_keys_and_scopes():
    long = [appended("m", f"request-{i}", key=f"k{i}-" + "x" * 500, session="s" * 500) for i in range(2 * MOST_KEYS)]
    tracemalloc.start()
    try:
        first = FirstAppends()
        for event in long:
            first.repeated(event)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(first) == MOST_KEYS and held < 2_000_000, f"{held:,} bytes held"
