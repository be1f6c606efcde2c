"""Pure summarizer decisions: which summary is due for a session, and the word budget it gets."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_json

from services.events import Event, MessageAppended, SessionCreated, SummaryKind, SummaryRetryRequested, SummaryUpdated
from services.summarizer.settings import SummarizerSettings

KEEP_CHARS = 4000  # per message kept for the next summary; a summary is no place for a whole essay
OVERRIDE_KEYS = {SummaryKind.SHORT: "summary_short_every", SummaryKind.LONG: "summary_long_every"}


class Line(BaseModel):
    model_config = ConfigDict(frozen=True)

    message_id: str
    seq: int
    peer_id: str
    content: str
    weight: int = 0  # its bytes in the changelog record, ids included (0 in states from before the bound)


class Track(BaseModel):
    """One kind's progress: messages since its last summary, and that summary."""

    model_config = ConfigDict(frozen=True)

    pending: tuple[Line, ...] = ()
    previous: str = ""
    due_at: int = 0  # pending count at which the next attempt is made (0 = the configured cadence)
    failures: int = 0  # dead-lettered attempts since the last summary


@dataclass(frozen=True)
class Dropped:
    """Pending messages of one kind that fell out of the bounded state unsummarised."""

    kind: SummaryKind
    first_seq: int
    last_seq: int
    failures: int


class SessionSummaries(BaseModel):
    model_config = ConfigDict(frozen=True)

    every: dict[SummaryKind, int] = Field(default_factory=dict)  # per-session cadence overrides
    tracks: dict[SummaryKind, Track] = Field(default_factory=dict)
    seq: int = 0


def cadence(state: SessionSummaries, kind: SummaryKind, settings: SummarizerSettings) -> int:
    default = settings.short_every if kind == SummaryKind.SHORT else settings.long_every
    return state.every.get(kind, default)


def evolve(state: SessionSummaries, event: Event) -> SessionSummaries:
    """The state after a session event (messages queue up for both kinds)."""
    if isinstance(event, SessionCreated):
        every = {k: int(event.metadata[key]) for k, key in OVERRIDE_KEYS.items()
                 if str(event.metadata.get(key, "")).isdigit() and int(event.metadata[key]) > 0}
        return state.model_copy(update={"every": every})
    if isinstance(event, MessageAppended):
        line = Line(message_id=event.message_id, seq=state.seq + 1, peer_id=event.peer_id,
                    content=event.content[:KEEP_CHARS])
        line = line.model_copy(update={"weight": len(to_json(line)) + 16})  # + the weight field itself
        tracks = {k: state.tracks.get(k, Track()) for k in SummaryKind}
        tracks = {k: t.model_copy(update={"pending": (*t.pending, line)}) for k, t in tracks.items()}
        return state.model_copy(update={"tracks": tracks, "seq": state.seq + 1})
    if isinstance(event, SummaryRetryRequested):  # a kind that failed is due at once (due_at 1: any pending)
        tracks = {k: t.model_copy(update={"due_at": 1}) if t.failures else t for k, t in state.tracks.items()}
        return state.model_copy(update={"tracks": tracks})
    return state


def _weights(track: Track) -> list[int]:
    """What each pending message weighs in the changelog record."""
    return [line.weight for line in track.pending]


def due(state: SessionSummaries, settings: SummarizerSettings) -> list[SummaryKind]:
    """The kinds whose cadence the pending messages have reached, or (unless waiting out a failure) their
    byte bound: a long cadence must not make the bound drop messages a working model would summarise."""
    out = []
    for kind, track in state.tracks.items():
        if len(track.pending) >= (track.due_at or cadence(state, kind, settings)) or (
                not track.due_at and sum(_weights(track)) > settings.pending_max_bytes):
            out.append(kind)
    return out


def bounded(state: SessionSummaries, settings: SummarizerSettings) -> tuple[SessionSummaries, list[Dropped]]:
    """The state with each kind's pending text within `pending_max_bytes`, and what fell out. A kind over
    the bound loses its oldest messages down to half of it, so a model that keeps failing costs one dead
    letter per half-bound of messages rather than one per message; its next attempt keeps its distance."""
    tracks, dropped = dict(state.tracks), []
    for kind, track in state.tracks.items():
        weights = _weights(track)
        if sum(weights) <= settings.pending_max_bytes:
            continue
        keep, size = len(weights), 0
        while size + weights[keep - 1] <= settings.pending_max_bytes // 2:
            keep -= 1
            size += weights[keep]
        gone = track.pending[:keep]
        dropped.append(Dropped(kind, gone[0].seq, gone[-1].seq, track.failures))
        tracks[kind] = track.model_copy(update={"pending": track.pending[keep:],
                                                "due_at": max(0, track.due_at - len(gone))})
    return state.model_copy(update={"tracks": tracks}), dropped


def word_limit(kind: SummaryKind, input_tokens: int, settings: SummarizerSettings) -> int:
    if kind == SummaryKind.SHORT:
        return max(1, int(0.75 * min(input_tokens, settings.short_max_input_tokens)))
    return settings.long_max_words


def clip_words(text: str, limit: int) -> str:
    """At most `limit` words: the limit is a promise, not a request to the model."""
    words = text.split()
    return text.strip() if len(words) <= limit else " ".join(words[:limit])


def summarised(state: SessionSummaries, event: SummaryUpdated) -> SessionSummaries:
    """The state after a summary of `event.kind` covering up to `event.last_seq` was recorded."""
    track = state.tracks[event.kind]
    rest = tuple(line for line in track.pending if line.seq > event.last_seq)
    tracks = {**state.tracks, event.kind: Track(pending=rest, previous=event.content)}
    return state.model_copy(update={"tracks": tracks})


def failed(state: SessionSummaries, kind: SummaryKind, settings: SummarizerSettings) -> SessionSummaries:
    """After a dead-lettered attempt: keep the messages, try again one cadence later."""
    track = state.tracks[kind]
    retry_at = len(track.pending) + cadence(state, kind, settings)
    again = track.model_copy(update={"due_at": retry_at, "failures": track.failures + 1})
    return state.model_copy(update={"tracks": {**state.tracks, kind: again}})
