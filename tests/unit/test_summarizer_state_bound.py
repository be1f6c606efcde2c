"""Issue 17 §2.7: the summarizer's pending state stays within its byte bound while the model keeps failing,
and every message that falls out is named by a dead letter."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from services.events import MessageAppended, ProducerInfo, SummaryKind
from services.settings import Settings
from services.summarizer.policy import SessionSummaries, bounded, due, evolve, failed
from services.summarizer.settings import SummarizerSettings

P = ProducerInfo(component="test", version="0")
T = datetime(2026, 1, 1, tzinfo=UTC)
S = SummarizerSettings(short_every=5, long_every=15, pending_max_bytes=16_384)


def msg(i: int, size: int = 1000, id_chars: int = 0) -> MessageAppended:
    return MessageAppended(
        workspace_id="w",
        session_id="s",
        message_id=f"m{i}".rjust(id_chars, "0"),
        peer_id="a",
        content=f"{i} " + "x" * size,
        created_at=T,
        producer=P,
    )


def record_bytes(track) -> int:
    return len(orjson.dumps([line.model_dump(mode="json") for line in track.pending]))


def with_a_failing_model(n: int, settings: SummarizerSettings = S, **message):
    """What the summarizer's shell does per message when every model call fails: the final state, the
    dropped ranges, and the seq at which each kind was attempted."""
    state, dropped, attempts = SessionSummaries(), [], {k: [] for k in SummaryKind}
    g = Settings(summarizer=settings).configuration()
    for i in range(1, n + 1):
        state = evolve(state, msg(i, **message), g)
        for kind in due(state, settings, g):
            attempts[kind].append(i)
            state = failed(state, kind, g)
        state, gone = bounded(state, settings)
        dropped += gone
    return state, dropped, attempts


def test_a_failing_model_keeps_each_kinds_pending_messages_within_the_bound():
    state, _, _ = with_a_failing_model(200)
    assert len(orjson.dumps(state.model_dump(mode="json"))) < 2 * S.pending_max_bytes + 4096
    assert all(record_bytes(track) <= S.pending_max_bytes for track in state.tracks.values())


def test_the_bound_counts_the_ids_too_not_only_the_text():
    state, dropped, _ = with_a_failing_model(400, size=10, id_chars=512)  # ids weigh 40 times the text
    assert dropped and all(record_bytes(track) <= S.pending_max_bytes for track in state.tracks.values())


def test_every_message_that_falls_out_is_in_exactly_one_dead_letter_and_the_rest_are_still_pending():
    state, dropped, _ = with_a_failing_model(200)
    for kind in SummaryKind:
        ranges = [(d.first_seq, d.last_seq) for d in dropped if d.kind == kind]
        lost = [seq for first, last in ranges for seq in range(first, last + 1)]
        kept = [line.seq for line in state.tracks[kind].pending]
        assert lost + kept == list(range(1, 201))  # contiguous, in order, nothing twice, nothing missing
    assert all(d.failures >= 1 for d in dropped)


def test_dropping_messages_does_not_stop_the_retries_of_a_kind():
    _, _, attempts = with_a_failing_model(200)
    for kind, seqs in attempts.items():
        assert seqs and seqs[-1] > 200 - 2 * S.long_every, (kind, seqs)


def test_a_long_cadence_reaches_the_bound_as_a_due_summary_not_as_dropped_messages():
    state, settings = (
        SessionSummaries(),
        SummarizerSettings(short_every=1000, long_every=1000, pending_max_bytes=16_384),
    )
    g = Settings(summarizer=settings).configuration()
    for i in range(1, 18):
        state = evolve(state, msg(i), g)
    assert set(due(state, settings, g)) == set(SummaryKind)  # 17 kB of text: summarise now, not drop
