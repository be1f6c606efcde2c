"""Retry: ask the summarizer, through the log, to try again now the summaries it dead-lettered.

The summarizer keeps a failed kind's messages pending and tries again only one cadence later. Once the
model is fixed, `peerlog derivations retry` appends a SummaryRetryRequested for each session whose summary
dead letters have no summary after them (the rule GetProcessingStatus shows them by, which also always shows
those of dropped messages); the summarizer then
makes the failed kinds due at once. Messages that fell out of its bounded state are not summarised again:
their dead letter stays in `dead_letters`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from services.bus.consistency import ConsistencyToken
from services.bus.producer import EventLog
from services.bus.streams import read, to_the_end
from services.bus.topics import DEADLETTER, SUMMARIES
from services.events import Event, ProducerInfo, SummaryDeadLettered, SummaryRetryRequested, SummaryUpdated

PRODUCER = ProducerInfo(component="summary-retry", version="0.1.0")


@dataclass(frozen=True)
class SummaryRetry:
    sessions: tuple[str, ...]  # the sessions asked to try again
    consistency_token: str  # where the requests were written


def unsummarised(events: Iterable[Event], workspace_id: str) -> list[str]:
    """The workspace's sessions with a summary dead letter later than their latest summary of that kind (a
    long summary written after a short one failed leaves the short one to retry)."""
    failed: dict[tuple[str, str], datetime] = {}
    summarised: dict[tuple[str, str], datetime] = {}
    for e in events:
        if isinstance(e, SummaryDeadLettered | SummaryUpdated) and e.workspace_id == workspace_id:
            latest = failed if isinstance(e, SummaryDeadLettered) else summarised
            key = (e.session_id, e.kind.value)
            latest[key] = max(latest.get(key, e.occurred_at), e.occurred_at)
    return sorted({key[0] for key, at in failed.items() if key not in summarised or at > summarised[key]})


def _summary_events(settings) -> list[Event]:
    """Every committed summary and dead letter, as of now."""
    topics = [t.full_name(settings.kafka.topic_prefix) for t in (DEADLETTER, SUMMARIES)]
    return [
        e
        for topic in topics
        for m in to_the_end(settings.kafka, topic, timeout=3600, must_exist=True)
        if (e := read(m.value())) is not None
    ]


async def retry_summaries(settings, workspace_id: str) -> SummaryRetry:
    """Append a SummaryRetryRequested for each session of the workspace with summaries to retry."""
    sessions = unsummarised(await asyncio.to_thread(_summary_events, settings), workspace_id)
    if not sessions:
        return SummaryRetry((), ConsistencyToken.of([]).encode())
    log = EventLog(settings.kafka, client_id="peerlog-summary-retry")
    log.start()
    try:
        token = await log.append(
            [SummaryRetryRequested(workspace_id=workspace_id, session_id=s, producer=PRODUCER) for s in sessions]
        )
    finally:
        log.close()
    return SummaryRetry(tuple(sessions), token.encode())
