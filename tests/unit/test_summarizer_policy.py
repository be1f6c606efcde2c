"""The summarizer's pure core: cadence, overrides, word budgets, retry after failure."""

from __future__ import annotations

from datetime import UTC, datetime

from services.events import MessageAppended, ProducerInfo, SessionCreated, SummaryKind, SummaryUpdated
from services.summarizer.policy import SessionSummaries, clip_words, due, evolve, failed, summarised, word_limit
from services.summarizer.settings import SummarizerSettings

P = ProducerInfo(component="test", version="0")
T = datetime(2026, 1, 1, tzinfo=UTC)
S = SummarizerSettings(short_every=2, long_every=4)


def msg(i):
    return MessageAppended(workspace_id="w", session_id="s", message_id=f"m{i}", peer_id="a", content=f"t{i}",
                           created_at=T, producer=P)


def fed(n, state=None):
    state = state or SessionSummaries()
    for i in range(n):
        state = evolve(state, msg(i))
    return state


def test_kinds_fall_due_at_their_cadence():
    assert due(fed(1), S) == []
    assert due(fed(2), S) == [SummaryKind.SHORT]
    assert set(due(fed(4), S)) == {SummaryKind.SHORT, SummaryKind.LONG}


def test_session_metadata_overrides_the_cadence():
    state = evolve(SessionSummaries(), SessionCreated(workspace_id="w", session_id="s", producer=P,
                                                      metadata={"summary_short_every": "3"}))
    assert due(fed(2, state), S) == [] and due(fed(3, state), S) == [SummaryKind.SHORT]


def test_a_recorded_summary_keeps_only_later_messages_and_becomes_the_previous_one():
    state = fed(2)
    done = SummaryUpdated(workspace_id="w", session_id="s", kind=SummaryKind.SHORT, content="so far", last_message_id="m1",
                          last_seq=2, messages_covered=2, token_count=2, model="m", prompt_version="v", producer=P)
    after = summarised(state, done)
    assert after.tracks[SummaryKind.SHORT].pending == () and after.tracks[SummaryKind.SHORT].previous == "so far"
    assert len(after.tracks[SummaryKind.LONG].pending) == 2


def test_after_a_failure_the_messages_stay_and_the_next_try_waits_one_cadence():
    state = failed(fed(2), SummaryKind.SHORT, S)
    assert due(state, S) == [] and SummaryKind.SHORT in due(fed(2, state), S)
    assert len(fed(2, state).tracks[SummaryKind.SHORT].pending) == 4


def test_word_limits_follow_the_design():
    assert word_limit(SummaryKind.SHORT, 100, SummarizerSettings()) == 75
    assert word_limit(SummaryKind.SHORT, 5000, SummarizerSettings()) == 750
    assert word_limit(SummaryKind.LONG, 5000, SummarizerSettings()) == 3000
    assert clip_words("a b c d", 2) == "a b"
