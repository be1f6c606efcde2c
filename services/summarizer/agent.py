"""The summarizer's shell: session events in, SummaryUpdated out, per-session state in its changelog."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from services.bus.runner import Get, Step
from services.bus.topics import SESSIONS
from services.events import Event, ProducerInfo, SummaryDeadLettered, SummaryKind, SummaryUpdated
from services.llm.client import Completion, ModelClient
from services.llm.errors import ModelError, ModelRequestRejected, shown
from services.llm.formats import storable
from services.llm.tokens import count_tokens
from services.summarizer.policy import (
    Attempt,
    Dropped,
    Failure,
    SessionSummaries,
    after_failure,
    bounded,
    clip_words,
    due,
    evolve,
    over_bound,
    portion,
    room,
    summarised,
    word_limit,
)
from services.summarizer.prompt import PROMPT_VERSION, build_messages

if TYPE_CHECKING:
    from services.settings import Settings

log = logging.getLogger(__name__)
CATCH_UP = 8  # summary calls of one kind an event may make to bring it back within its byte bound

# the 4xx statuses that may be about what a call read (a bad request, too large, unprocessable); the others
# are a key, credit, a permission or the model's name, which every call meets (429 and 408 are retried)
CONTENT_STATUSES = frozenset({400, 413, 422})
# words in such a reply that blame what every call sends, not its messages: a max_tokens setting, a
# parameter, the model, the key. Taken for the messages, each call's would be left out one by one
SETTING_WORDS = ("max_tokens", "max_completion_tokens", "parameter", "model", "api key", "api_key")


def cause(error: ModelError) -> Failure:
    """Why a summary call failed, for the core: only a refusal about what the call read is the messages'."""
    if not isinstance(error, ModelRequestRejected):  # unreachable, 5xx or 429 retried out, a garbled reply
        return Failure.OUTAGE
    if error.too_long:
        return Failure.TOO_LONG
    said = error.body.lower()
    if error.status_code in CONTENT_STATUSES and not any(word in said for word in SETTING_WORDS):
        return Failure.REFUSED
    return Failure.OUTAGE


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
        out: list[Event] = []
        for kind in due(state, self.settings, self.global_):
            state = await self.catch_up(state, kind, event, out)
        state, dropped = bounded(state, self.settings)  # the state is one record: it must fit the broker's limit
        out += [self.dropped(d, event) for d in dropped]
        return Step(out, {event.key: state.model_dump(mode="json")})

    async def catch_up(self, state: SessionSummaries, kind: SummaryKind, event, out: list[Event]) -> SessionSummaries:
        """Summaries of `kind` (appended to `out`) until it is within its byte bound, CATCH_UP calls at most. One
        call reads what fits its room: a few short messages before a long one freed too few bytes, and the
        bound dropped messages a working model was summarising, with a dead letter blaming the model."""
        for _ in range(CATCH_UP):
            result, attempt = await self.summarise(state, kind, event)
            if isinstance(result, SummaryDeadLettered) and attempt is not None:
                state, gone = after_failure(state, kind, self.global_, attempt)
                out.append(self.dropped(gone, event, result.error) if gone else result)
                # past a message the model refused alone, the rest is summarised now if its cadence has passed
                if gone is None or kind not in due(state, self.settings, self.global_):
                    return state
                continue
            out.append(result)
            state = summarised(state, result)
            if not over_bound(state.tracks[kind], self.settings):
                break
        return state

    def dropped(self, gone: Dropped, event, refusal: str = "") -> SummaryDeadLettered:
        """The dead letter of messages that fell out of the pending state, or of the one message the model
        refused alone (`refusal`: the model's error); no later summary covers them."""
        log.warning(
            "summary %s of %s: messages %d-%d dropped unsummarised",
            gone.kind,
            event.session_id,
            gone.first_seq,
            gone.last_seq,
        )
        error = self.refused_alone(gone, refusal) if gone.message_id else self.fell_out(gone)
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

    def fell_out(self, gone: Dropped) -> str:
        why = (
            "while the model kept failing" if gone.failures else f"faster than {CATCH_UP} summary calls a message freed"
        )
        return (
            f"messages {gone.first_seq}-{gone.last_seq} of the session fell out of the pending {gone.kind} "
            f"summary (over {self.settings.pending_max_bytes} bytes) {why}"
        )

    @staticmethod
    def refused_alone(gone: Dropped, refusal: str) -> str:
        said = (
            f"message {gone.message_id} (seq {gone.last_seq}) of the session was left out of the {gone.kind} "
            f"summary: the model refused a call holding it alone: {refusal}"
        )
        return said[:4000]

    async def summarise(self, state: SessionSummaries, kind: SummaryKind, event) -> tuple[Event, Attempt | None]:
        """A SummaryUpdated for `kind`; or SummaryDeadLettered when the model keeps failing, with the failed
        call as the core weighs it."""
        track = state.tracks[kind]
        lines = portion(track, self.settings.max_input_tokens, count_tokens)
        tried = room(track, self.settings.max_input_tokens)
        # what the summary is made of: the new messages and the summary it rolls on. Counted without the
        # latter, twenty turns of "ok" held a rolling summary of eighty words to twenty, cut mid-sentence
        read = sum(count_tokens(line.content) for line in lines) + count_tokens(track.previous)
        words = word_limit(kind, read, self.settings, self.model.settings.max_tokens)
        last = lines[-1]
        common = dict(
            workspace_id=event.workspace_id, session_id=event.session_id, kind=kind, causation_id=event.event_id
        )
        try:
            done, words = await self.written(kind, track.previous, lines, words)
        except ModelError as exc:
            why = cause(exc)
            log.warning("summary %s of %s dead-lettered (%s): %s", kind, event.session_id, why, exc)
            letter = SummaryDeadLettered(
                last_seq=last.seq,
                error=shown(exc)[:4000],
                attempts=self.model.settings.max_retries + 1,
                producer=self.producer(self.model.settings.model),
                **common,
            )
            return letter, Attempt(why, len(lines), tried)
        # a NUL would pass here and be refused by the projection: the summary lost while counted done
        content = clip_words(storable(done.value), words)
        unusable = self.unusable(done, content, words)
        if unusable:  # cut twice or empty: a setting (max_tokens, a reasoning model's thinking) more often than
            # the messages, so they stay pending, as in an outage; only a refusal about content leaves one out
            log.warning("summary %s of %s dead-lettered (unusable reply): %s", kind, event.session_id, unusable)
            letter = SummaryDeadLettered(
                last_seq=last.seq,
                error=unusable[:4000],
                attempts=1,
                producer=self.producer(done.model),
                **common,
            )
            return letter, Attempt(Failure.OUTAGE, len(lines), tried)
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
        return updated, None

    async def written(self, kind: SummaryKind, previous: str, lines, words: int) -> tuple[Completion[str], int]:
        """The summary and the words it was asked for; asked again for half as many if the reply stopped at
        max_tokens (the words a reply holds vary by language: 0.6 a token is English), else stored cut
        mid-sentence as done, and the next summary built on it. Cut again, it is returned cut (`unusable`)."""
        done = await self.model.text(build_messages(kind, previous, lines, words))
        if done.cut and words > 1:
            words //= 2
            done = await self.model.text(build_messages(kind, previous, lines, words))
        return done, words

    def unusable(self, done: Completion[str], content: str, words: int) -> str:
        """Why a reply is no summary to store ("" if it is one): cut at max_tokens even when asked for half
        the words (the error names the setting to raise), or empty."""
        if done.cut:
            return shown(self.model.cut_off(done.value, f"a summary of at most {words} words did not fit"))
        return "" if content else "the model returned an empty summary"


def build(settings: Settings):
    return Summarizer(settings), None
