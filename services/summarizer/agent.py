"""The summarizer's Faust shell: session events in, SummaryUpdated out, per-session state in a table."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from services.bus.streams import Wiring, read
from services.bus.topics import DEADLETTER, SESSIONS, SUMMARIES
from services.events import ProducerInfo, SummaryDeadLettered, SummaryKind, SummaryUpdated
from services.llm.client import ModelClient
from services.llm.errors import ModelError
from services.llm.tokens import count_tokens
from services.summarizer.policy import SessionSummaries, clip_words, due, evolve, failed, summarised, word_limit
from services.summarizer.prompt import PROMPT_VERSION, build_messages

if TYPE_CHECKING:
    from services.settings import Settings

log = logging.getLogger(__name__)


class Summarizer:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings.summarizer
        self.model = ModelClient("summarizer", settings.llm.stage("summarizer"))

    def producer(self, model: str) -> ProducerInfo:
        return ProducerInfo(component="summarizer", version="0.1.0", model=model, prompt_version=PROMPT_VERSION)

    async def summarise(self, state: SessionSummaries, kind: SummaryKind, event):
        """A SummaryUpdated for `kind`, or SummaryDeadLettered when the model keeps failing."""
        track = state.tracks[kind]
        tokens = sum(count_tokens(line.content) for line in track.pending)
        words = word_limit(kind, tokens, self.settings)
        last = track.pending[-1]
        common = dict(workspace_id=event.workspace_id, session_id=event.session_id, kind=kind,
                      causation_id=event.event_id)
        try:
            done = await self.model.text(build_messages(kind, track.previous, track.pending, words))
        except ModelError as exc:
            log.warning("summary %s of %s dead-lettered: %s", kind, event.session_id, exc)
            return SummaryDeadLettered(last_seq=last.seq, error=str(exc)[:4000], producer=self.producer(
                self.model.settings.model), attempts=self.model.settings.max_retries + 1, **common)
        content = clip_words(done.value, words)
        if not content:
            return SummaryDeadLettered(last_seq=last.seq, error="the model returned an empty summary",
                                       producer=self.producer(done.model), attempts=1, **common)
        return SummaryUpdated(content=content, last_message_id=last.message_id, last_seq=last.seq,
                              messages_covered=len(track.pending), token_count=count_tokens(content),
                              model=done.model, prompt_version=PROMPT_VERSION, producer=self.producer(done.model),
                              **common)


def register(w: Wiring, settings: Settings) -> None:
    sessions, send = w.topic(SESSIONS), w.sender(SUMMARIES, DEADLETTER)
    states = w.table("summarizer-sessions")
    summarizer = Summarizer(settings)

    @w.app.agent(sessions, name="summarizer")
    async def summarise(stream):
        async for record in stream.events():
            event = read(record.value)
            if event is None:
                continue
            raw = states.get(event.key)
            state = evolve(SessionSummaries.model_validate(raw) if raw else SessionSummaries(), event)
            for kind in due(state, settings.summarizer):
                out = await summarizer.summarise(state, kind, event)
                await send(out)
                state = summarised(state, out) if isinstance(out, SummaryUpdated) else failed(
                    state, kind, settings.summarizer)
            states[event.key] = state.model_dump(mode="json")
