"""The summarizer's shell: session events in, SummaryUpdated out, per-session state in its changelog."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from services.bus.runner import Get, Step
from services.bus.topics import SESSIONS
from services.events import Event, ProducerInfo, SummaryDeadLettered, SummaryKind, SummaryUpdated
from services.llm.client import ModelClient
from services.llm.errors import ModelError, ModelRequestRejected, shown
from services.llm.formats import storable
from services.llm.tokens import count_tokens
from services.summarizer.policy import (
    Dropped,
    SessionSummaries,
    bounded,
    clip_words,
    due,
    evolve,
    failed,
    portion,
    room,
    summarised,
    word_limit,
)
from services.summarizer.prompt import PROMPT_VERSION, build_messages

if TYPE_CHECKING:
    from services.settings import Settings

log = logging.getLogger(__name__)


class Summarizer:
    name = "summarizer"
    inputs = (SESSIONS,)
    max_batch = 50

    def __init__(self, settings: Settings) -> None:
        self.settings = settings.summarizer
        self.global_ = settings.configuration()
        self.model = ModelClient("summarizer", settings.llm.stage("summarizer"))

    def producer(self, model: str) -> ProducerInfo:
        return ProducerInfo(component="summarizer", version="0.1.0", model=model, prompt_version=PROMPT_VERSION)

    async def handle(self, get: Get, event: Event) -> Step:
        raw = get(event.key)
        state = evolve(SessionSummaries.model_validate(raw) if raw else SessionSummaries(), event, self.global_)
        out = []
        for kind in due(state, self.settings, self.global_):
            result, refused = await self.summarise(state, kind, event)
            out.append(result)
            tried = room(state.tracks[kind], self.settings.max_input_tokens) if refused else None
            state = (
                summarised(state, result)
                if isinstance(result, SummaryUpdated)
                else failed(state, kind, self.global_, tried)
            )
        state, dropped = bounded(state, self.settings)  # the state is one record: it must fit the broker's limit
        out += [self.dropped(d, event) for d in dropped]
        return Step(out, {event.key: state.model_dump(mode="json")})

    def dropped(self, gone: Dropped, event) -> SummaryDeadLettered:
        """The dead letter of messages that fell out of the pending state while the model kept failing."""
        log.warning(
            "summary %s of %s: messages %d-%d dropped unsummarised",
            gone.kind,
            event.session_id,
            gone.first_seq,
            gone.last_seq,
        )
        error = (
            f"messages {gone.first_seq}-{gone.last_seq} of the session fell out of the pending {gone.kind} "
            f"summary (over {self.settings.pending_max_bytes} bytes) while the model kept failing"
        )
        return SummaryDeadLettered(
            workspace_id=event.workspace_id,
            session_id=event.session_id,
            kind=gone.kind,
            last_seq=gone.last_seq,
            error=error,
            attempts=gone.failures,
            dropped=True,
            causation_id=event.event_id,
            producer=self.producer(self.model.settings.model),
        )

    async def summarise(self, state: SessionSummaries, kind: SummaryKind, event) -> tuple[Event, bool]:
        """A SummaryUpdated for `kind`, or SummaryDeadLettered when the model keeps failing; and whether
        the model refused the request (as one does a prompt past its context)."""
        track = state.tracks[kind]
        lines = portion(track, self.settings.max_input_tokens, count_tokens)
        read = sum(count_tokens(line.content) for line in lines)
        words = word_limit(kind, read, self.settings, self.model.settings.max_tokens)
        last = lines[-1]
        common = dict(
            workspace_id=event.workspace_id, session_id=event.session_id, kind=kind, causation_id=event.event_id
        )
        try:
            done = await self.model.text(build_messages(kind, track.previous, lines, words))
        except ModelError as exc:
            log.warning("summary %s of %s dead-lettered: %s", kind, event.session_id, exc)
            letter = SummaryDeadLettered(
                last_seq=last.seq,
                error=shown(exc)[:4000],
                attempts=self.model.settings.max_retries + 1,
                producer=self.producer(self.model.settings.model),
                **common,
            )
            return letter, isinstance(exc, ModelRequestRejected)
        # a NUL would pass here and be refused by the projection: the summary lost while counted done
        content = clip_words(storable(done.value), words)
        if not content:
            empty = SummaryDeadLettered(
                last_seq=last.seq,
                error="the model returned an empty summary",
                attempts=1,
                producer=self.producer(done.model),
                **common,
            )
            return empty, False
        updated = SummaryUpdated(
            content=content,
            last_message_id=last.message_id,
            last_seq=last.seq,
            messages_covered=len(lines),
            token_count=count_tokens(content),
            model=done.model,
            prompt_version=PROMPT_VERSION,
            producer=self.producer(done.model),
            **common,
        )
        return updated, False


def build(settings: Settings):
    return Summarizer(settings), None
