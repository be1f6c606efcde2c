"""Pure summarizer decisions: which summary is due for a session, and the word budget it gets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import to_json

from services.events import (
    Configuration,
    Effective,
    Event,
    MessageAppended,
    MessageConfigured,
    SessionConfigured,
    SummaryKind,
    SummaryRetryRequested,
    SummaryUpdated,
    resolve,
)
from services.summarizer.settings import SummarizerSettings

KEEP_CHARS = 4000  # per message kept for the next summary; a summary is no place for a whole essay
CADENCE = {SummaryKind.SHORT: "summary_short_every", SummaryKind.LONG: "summary_long_every"}


class Line(BaseModel):
    model_config = ConfigDict(frozen=True)

    message_id: str
    seq: int
    peer_id: str
    content: str
    author_name: str = ""  # the author's display name (MessageAppended.author_name), if any
    weight: int = 0  # its bytes in the changelog record, ids included (0 in states from before the bound)


class Track(BaseModel):
    """One kind's progress: messages since its last summary, and that summary."""

    model_config = ConfigDict(frozen=True)

    pending: tuple[Line, ...] = ()
    previous: str = ""
    due_at: int = 0  # pending count at which the next attempt is made (0 = the configured cadence)
    failures: int = 0  # dead-lettered attempts since the last summary
    room: int = 0  # tokens of messages one call reads; 0: PEERLOG_SUMMARIZER_MAX_INPUT_TOKENS (see `portion`)
    # while the model refuses what it is sent, the next call reads `at_most` messages (0: what fits the room),
    # till a summary passes the last message of the refused calls (`refused_through`) or one is left out
    at_most: int = 0
    refused_through: int = 0


@dataclass(frozen=True)
class Dropped:
    """Pending messages of one kind that fell out of the bounded state unsummarised."""

    kind: SummaryKind
    first_seq: int
    last_seq: int
    failures: int
    message_id: str = ""  # set when the model refused this one message alone (`after_failure`)


class SessionSummaries(BaseModel):
    model_config = ConfigDict(frozen=True)

    # the configuration levels in force: the session's, and the workspace's and message's of the latest message
    session: Configuration | None = None
    workspace: Configuration | None = None
    message: Configuration | None = None
    tracks: dict[SummaryKind, Track] = Field(default_factory=dict)
    seq: int = 0

    @model_validator(mode="before")
    @classmethod
    def _cadence_overrides(cls, data):
        # a state from before the hierarchy kept session-metadata cadences as `every`: they are session level
        if isinstance(data, dict) and "every" in data:
            data = dict(data)
            every = data.pop("every") or {}
            data.setdefault("session", {CADENCE[SummaryKind(k)]: v for k, v in every.items()} or None)
        return data


def effective(state: SessionSummaries, global_: Configuration) -> Effective:
    return resolve(global_, state.workspace, state.session, state.message)


def cadence(state: SessionSummaries, kind: SummaryKind, global_: Configuration) -> int:
    return effective(state, global_)[CADENCE[kind]]


def summarising(state: SessionSummaries, global_: Configuration) -> bool:
    """Whether the settings in force ask for summaries (reasoning off turns them off too)."""
    config = effective(state, global_)
    return config["reasoning"] and config["summaries"]


def evolve(state: SessionSummaries, event: Event, global_: Configuration) -> SessionSummaries:
    """The state after a session event (messages queue up for both kinds, unless summaries are off for them)."""
    if isinstance(event, SessionConfigured):
        return state.model_copy(update={"session": event.configuration, "message": None})
    if isinstance(event, MessageAppended):
        state = state.model_copy(
            update={"workspace": event.workspace_configuration, "message": event.configuration, "seq": state.seq + 1}
        )
        if not summarising(state, global_):
            return state
        line = Line(
            message_id=event.message_id,
            seq=state.seq,
            peer_id=event.peer_id,
            content=event.content[:KEEP_CHARS],
            author_name=event.author_name,
        )
        line = line.model_copy(update={"weight": len(to_json(line)) + 16})  # + the weight field itself
        tracks = {k: state.tracks.get(k, Track()) for k in SummaryKind}
        tracks = {k: t.model_copy(update={"pending": (*t.pending, line)}) for k, t in tracks.items()}
        return state.model_copy(update={"tracks": tracks})
    if isinstance(event, MessageConfigured):
        return withdrawn(state, event, global_)
    if isinstance(event, SummaryRetryRequested):  # a kind that failed is due at once (due_at 1: any pending)
        tracks = {k: t.model_copy(update={"due_at": 1}) if t.failures else t for k, t in state.tracks.items()}
        # the request is about the session, not its latest message: that message's level (reasoning or
        # summaries off for it alone) answered `due` for the whole session and the retry did nothing
        return state.model_copy(update={"tracks": tracks, "message": None})
    return state


def withdrawn(state: SessionSummaries, event: MessageConfigured, global_: Configuration) -> SessionSummaries:
    """The state after a message's level was set: turned off for reasoning or summaries, the message leaves
    every kind's pending messages, since its new level governs what is read of it from now. Turned back on,
    it is not queued again: its text is no longer here, and the summaries since went on without it."""
    if summarising(state.model_copy(update={"message": event.configuration}), global_):
        return state
    tracks = {
        k: t.model_copy(update={"pending": tuple(line for line in t.pending if line.message_id != event.message_id)})
        for k, t in state.tracks.items()
    }
    return state.model_copy(update={"tracks": tracks})


def _weights(track: Track) -> list[int]:
    """What each pending message weighs in the changelog record."""
    return [line.weight for line in track.pending]


def over_bound(track: Track, settings: SummarizerSettings) -> bool:
    """Whether the kind's pending text passes `pending_max_bytes` (`bounded` would drop its oldest)."""
    return sum(_weights(track)) > settings.pending_max_bytes


def due(state: SessionSummaries, settings: SummarizerSettings, global_: Configuration) -> list[SummaryKind]:
    """The kinds whose cadence the pending messages have reached, or (unless waiting out a failure) their
    byte bound: a long cadence must not make the bound drop messages a working model would summarise."""
    if not summarising(state, global_):
        return []
    out = []
    for kind, track in state.tracks.items():
        if not track.pending:
            continue
        if len(track.pending) >= (track.due_at or cadence(state, kind, global_)) or (
            not track.due_at and over_bound(track, settings)
        ):
            out.append(kind)
    return out


def bounded(state: SessionSummaries, settings: SummarizerSettings) -> tuple[SessionSummaries, list[Dropped]]:
    """The state with each kind's pending text within `pending_max_bytes`, and what fell out. A kind over
    the bound loses its oldest messages down to half of it, so a model that keeps failing costs one dead
    letter per half-bound of messages rather than one per message; its next attempt keeps its distance."""
    tracks, dropped = dict(state.tracks), []
    for kind, track in state.tracks.items():
        weights = _weights(track)
        if not over_bound(track, settings):
            continue
        keep, size = len(weights), 0
        while size + weights[keep - 1] <= settings.pending_max_bytes // 2:
            keep -= 1
            size += weights[keep]
        gone = track.pending[:keep]
        dropped.append(Dropped(kind, gone[0].seq, gone[-1].seq, track.failures))
        tracks[kind] = track.model_copy(
            update={"pending": track.pending[keep:], "due_at": max(0, track.due_at - len(gone))}
        )
    return state.model_copy(update={"tracks": tracks}), dropped


# ten times English's average word with its space: no real summary reaches it. The long summary's 3,000
# words make 30,000 characters (120 KB at most in UTF-8), which leaves the state record room (settings.py)
CHARS_PER_WORD = 10
MIN_CHARS = 200  # a limit of a few words may still hold a long one


# of the completion's tokens, what a summary's words may take: English runs about 1.3 tokens a word, other
# languages more. Asked for 3,000 words with a reply of 1,024 tokens, a long summary stopped mid-sentence
# and was stored so, as a summary done
WORDS_PER_REPLY_TOKEN = 0.6


def word_limit(kind: SummaryKind, input_tokens: int, settings: SummarizerSettings, reply_tokens: int) -> int:
    """The words a summary may have: by kind, and no more than the model's reply (`max_tokens`) holds."""
    most = max(1, int(WORDS_PER_REPLY_TOKEN * reply_tokens))
    if kind == SummaryKind.SHORT:
        return min(most, max(1, int(0.75 * min(input_tokens, settings.short_max_input_tokens))))
    return min(most, settings.long_max_words)


def clip_words(text: str, limit: int) -> str:
    """At most `limit` words and CHARS_PER_WORD × `limit` characters: the limit is a promise, not a request
    to the model. Words alone would not bound a text without spaces (a runaway "word", or Chinese), and the
    summary rides in a Kafka record and in this processor's state, both limited to 1 MiB."""
    words = text.split()
    clipped = text.strip() if len(words) <= limit else " ".join(words[:limit])
    return clipped[: max(MIN_CHARS, CHARS_PER_WORD * limit)].rstrip()


MIN_ROOM = 50  # tokens: halving stops here (one message is always sent, whatever its size)


def room(track: Track, max_input_tokens: int) -> int:
    """Tokens of messages the track's next call reads: the setting, or less where a bigger call failed."""
    return min(track.room or max_input_tokens, max_input_tokens)


def portion(track: Track, max_input_tokens: int, tokens: Callable[[str], int]) -> tuple[Line, ...]:
    """The oldest pending messages one summary call covers: as many as fit its `room` (at least one), and
    no more than `at_most`. A failed attempt keeps its messages and the next comes a cadence later with
    more: sent whole, every retry was bigger than the last, and once the backlog outgrew the model's context
    no summary of the session ever succeeded again. A call the model refuses (its context too small) halves
    the room, and the room that worked is kept (`failed`, `summarised`); the rest waits for the next call."""
    limit, most, used, out = room(track, max_input_tokens), track.at_most or len(track.pending), 0, []
    for line in track.pending:
        used += tokens(line.content)
        if out and (used > limit or len(out) >= most):
            break
        out.append(line)
    return tuple(out)


def summarised(state: SessionSummaries, event: SummaryUpdated) -> SessionSummaries:
    """The state after a summary of `event.kind` covering up to `event.last_seq` was recorded."""
    track = state.tracks[event.kind]
    rest = tuple(line for line in track.pending if line.seq > event.last_seq)
    after = Track(pending=rest, previous=event.content, room=track.room)
    if event.last_seq < track.refused_through:
        # the search for the message the model refuses goes on among the refused calls' messages: started
        # afresh at each summary, it sent a refused message after the first few in a call as big as the first
        after = after.model_copy(update={"at_most": track.at_most, "refused_through": track.refused_through})
    return state.model_copy(update={"tracks": {**state.tracks, event.kind: after}})


class Failure(StrEnum):
    """Why a summary call failed, as the shell tells the core (`Attempt`)."""

    OUTAGE = "outage"  # the model away, or what every call meets (a key, the model's name, a setting)
    TOO_LONG = "too_long"  # the prompt past the model's context
    # the model would not take or answer these messages: a 4xx about what the call read (a content
    # filter), an empty reply, a reply cut at max_tokens even when asked for half the words
    REFUSED = "refused"


@dataclass(frozen=True)
class Attempt:
    """A failed summary call: why, how many of the oldest pending messages it read, and its room (tokens)."""

    why: Failure
    held: int
    room: int


def failed(
    state: SessionSummaries, kind: SummaryKind, global_: Configuration, attempt: Attempt | None = None
) -> SessionSummaries:
    """After a dead-lettered attempt: keep the messages, try again one cadence later. A prompt past the
    model's context halves the room, for good (the context stays as small); a call the model refused for
    what it read halves the messages the next one reads, until a summary passes them or the message it
    refuses is found alone (`after_failure`); an outage (None) leaves the call as it was."""
    track = state.tracks[kind]
    update = {"due_at": len(track.pending) + cadence(state, kind, global_), "failures": track.failures + 1}
    if attempt is not None and attempt.why is Failure.TOO_LONG:
        update["room"] = max(MIN_ROOM, attempt.room // 2)
    if attempt is not None and attempt.why is Failure.REFUSED:
        # by messages, not tokens: a token room has a floor, and messages of a few tokens each stayed under it
        update["at_most"] = max(1, attempt.held // 2)
        update["refused_through"] = max(track.refused_through, track.pending[attempt.held - 1].seq)
    return state.model_copy(update={"tracks": {**state.tracks, kind: track.model_copy(update=update)}})


def after_failure(
    state: SessionSummaries, kind: SummaryKind, global_: Configuration, attempt: Attempt
) -> tuple[SessionSummaries, Dropped | None]:
    """The state after a failed call, and the message left out of the kind's summaries if the model refused
    it alone (too long or refused for its content): no smaller call can do without it, and kept, it came
    first in every later call. One such message held the kind back until the byte bound dropped hundreds
    of messages with it (1,500 messages: the first short summary at message 650, 474 messages dropped)."""
    if attempt.why is Failure.OUTAGE or attempt.held > 1:
        return failed(state, kind, global_, attempt), None
    track = state.tracks[kind]
    line = track.pending[0]  # a call reads the oldest pending first
    # past it the kind starts afresh: its next summary comes at its cadence, or now if that has passed
    rest = track.model_copy(
        update={"pending": track.pending[1:], "due_at": 0, "failures": 0, "at_most": 0, "refused_through": 0}
    )
    gone = Dropped(kind, line.seq, line.seq, track.failures + 1, message_id=line.message_id)
    return state.model_copy(update={"tracks": {**state.tracks, kind: rest}}), gone
