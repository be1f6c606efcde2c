"""Issue 17 §2.9: which sessions `peerlog derivations retry` asks to summarise again, and what the
summarizer does with the request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.events import (
    Configuration,
    MessageAppended,
    ProducerInfo,
    SummaryDeadLettered,
    SummaryKind,
    SummaryRetryRequested,
    SummaryUpdated,
)
from services.settings import Settings
from services.summarizer.policy import SessionSummaries, due, evolve, failed
from services.summarizer.retry import unsummarised
from services.summarizer.settings import SummarizerSettings

P = ProducerInfo(component="test", version="0")
T = datetime(2026, 1, 1, tzinfo=UTC)
S = SummarizerSettings(short_every=2, long_every=6)
G = Settings(summarizer=S).configuration()


def dead(session: str, minute: int, workspace: str = "w") -> SummaryDeadLettered:
    return SummaryDeadLettered(
        workspace_id=workspace,
        session_id=session,
        kind=SummaryKind.SHORT,
        last_seq=2,
        error="model down",
        attempts=2,
        producer=P,
        occurred_at=T + timedelta(minutes=minute),
    )


def summary(session: str, minute: int, kind: SummaryKind = SummaryKind.SHORT) -> SummaryUpdated:
    return SummaryUpdated(
        workspace_id="w",
        session_id=session,
        kind=kind,
        content="c",
        last_message_id="m",
        last_seq=6,
        messages_covered=6,
        token_count=1,
        model="m",
        prompt_version="1",
        producer=P,
        occurred_at=T + timedelta(minutes=minute),
    )


def test_only_sessions_whose_dead_letter_has_no_summary_after_it_are_retried():
    events = [
        dead("failed", 1),
        summary("recovered", 2),
        dead("recovered", 1),
        summary("failed-again", 1),
        dead("failed-again", 2),
        dead("elsewhere", 1, workspace="other"),
        summary("never-failed", 1),
    ]
    assert unsummarised(events, "w") == ["failed", "failed-again"]


def test_a_long_summary_after_a_failed_short_one_leaves_the_short_one_to_retry():
    events = [dead("s", 1), summary("s", 2, kind=SummaryKind.LONG)]
    assert unsummarised(events, "w") == ["s"]
    assert unsummarised([*events, summary("s", 3)], "w") == []


def test_a_retry_request_makes_a_failed_kind_due_at_once_and_leaves_the_others_alone():
    state = SessionSummaries()
    for i in range(2):
        state = evolve(
            state,
            MessageAppended(
                workspace_id="w",
                session_id="s",
                message_id=f"m{i}",
                peer_id="a",
                content="hi",
                created_at=T,
                producer=P,
            ),
            G,
        )
    state = failed(state, SummaryKind.SHORT, G)
    assert due(state, S, G) == []  # left alone, it would try again only a cadence later
    state = evolve(state, SummaryRetryRequested(workspace_id="w", session_id="s", producer=P), G)
    assert due(state, S, G) == [SummaryKind.SHORT]
    assert state.tracks[SummaryKind.LONG].due_at == 0


def said(i: int, **fields) -> MessageAppended:
    return MessageAppended(
        workspace_id="w",
        session_id="s",
        message_id=f"m{i}",
        peer_id="a",
        content="hi",
        created_at=T,
        producer=P,
        **fields,
    )


def test_a_retry_request_summarises_at_once_even_after_a_message_sent_with_reasoning_off():
    # `due` read the latest message's own level, so the request did nothing in a session whose last turn
    # was sent with reasoning (or summaries) off: the retry is about the session
    state = evolve(evolve(SessionSummaries(), said(0), G), said(1), G)
    state = failed(state, SummaryKind.SHORT, G)  # the model away at the short summary of m0 and m1
    state = evolve(state, said(2, configuration=Configuration(reasoning=False)), G)
    state = evolve(state, SummaryRetryRequested(workspace_id="w", session_id="s", producer=P), G)
    assert due(state, S, G) == [SummaryKind.SHORT]
    assert [line.message_id for line in state.tracks[SummaryKind.SHORT].pending] == ["m0", "m1"]
