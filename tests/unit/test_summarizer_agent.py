"""The summarizer's shell against a model server's answers: what shrinks a call's room, what a working model
summarises before the byte bound drops anything, how long a rolling summary may stay, and a cut reply."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from itertools import pairwise

import pytest

from services.events import (
    Configuration,
    Event,
    MessageAppended,
    MessageConfigured,
    ProducerInfo,
    SummaryDeadLettered,
    SummaryKind,
    SummaryUpdated,
)
from services.settings import Settings
from services.summarizer.agent import Summarizer
from services.summarizer.policy import Line, SessionSummaries, Track
from services.summarizer.settings import SummarizerSettings
from tests.support.mock_model import MockModel, completion, text

P = ProducerInfo(component="test", version="0")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> MockModel:
    mock = MockModel()
    mock.install(monkeypatch)
    return mock


def said(seq: int, content: str) -> MessageAppended:
    return MessageAppended(
        workspace_id="w",
        session_id="s",
        message_id=f"m{seq}",
        peer_id="ann",
        content=content,
        created_at=NOW,
        producer=P,
    )


def due_short(previous: str = "", content: str = "Ann and Bo met in Lisbon.") -> SessionSummaries:
    """A state whose short summary the next message makes due (the default cadence is 20)."""
    lines = tuple(Line(message_id=f"m{i}", seq=i, peer_id="ann", content=content) for i in range(1, 20))
    return SessionSummaries(tracks={SummaryKind.SHORT: Track(pending=lines, previous=previous)}, seq=19)


async def handled(summarizer: Summarizer, state: SessionSummaries, event: Event):
    step = await summarizer.handle(lambda _key: state.model_dump(mode="json"), event)
    return step.events, SessionSummaries.model_validate(step.states[event.key])


def asked_words(request: dict) -> int:
    return int(re.search(r"at most (\d+) words", request["messages"][0]["content"]).group(1))


FILTERED = "The response was filtered due to the prompt triggering content management policy"
REFUSALS = {  # status, what the server said, the room (tokens) and messages the next call reads
    "a wrong key": (401, "invalid api key", None, None),
    "a wrong model name": (404, "model 'x' not found", None, None),
    "max_tokens over the model's limit": (400, "max_tokens must be less than or equal to 8192", None, None),
    "max_tokens not taken": (400, "Unsupported parameter: 'max_tokens'; use 'max_completion_tokens'", None, None),
    "a prompt past the context": (400, "This model's maximum context length is 4096 tokens", 3000, None),
    "a content filter": (400, FILTERED, None, 10),
    "unprocessable text": (422, "Input contains invalid UTF-8 text", None, 10),
}


@pytest.mark.parametrize("status,body,room,at_most", REFUSALS.values(), ids=REFUSALS.keys())
async def test_a_prompt_past_the_context_halves_the_room_a_refused_one_the_messages_and_a_key_neither(
    server, status, body, room, at_most
):
    # any 4xx halved the room, for good: after a wrong key was fixed, each summary covered one message. A
    # refusal of what the call read halves its 20 messages, until the one refused is found (see below)
    server.answer = (status, "application/json", json.dumps({"error": {"message": body}}).encode())
    events, state = await handled(Summarizer(Settings()), due_short(), said(20, "Bo moved to Porto."))
    assert isinstance(events[0], SummaryDeadLettered)
    track = state.tracks[SummaryKind.SHORT]
    assert (track.room or None, track.at_most or None) == (room, at_most)


async def test_a_working_model_never_drops_messages_over_the_byte_bound(server):
    # a call reads what fits its room: short messages before a long one freed too few bytes, and the bound
    # dropped messages (with a dead letter saying "while the model kept failing") a working model summarised
    server.answer = text("A summary.")
    settings = Settings(
        summarizer=SummarizerSettings(
            short_every=10_000, long_every=10_000, max_input_tokens=100, pending_max_bytes=16_384
        )
    )
    summarizer, state, letters, covered = Summarizer(settings), SessionSummaries(), [], 0
    for seq in range(1, 61):
        content = "short turn " * 25 if seq % 2 else "a long turn of many words " * 150
        events, state = await handled(summarizer, state, said(seq, content))
        letters += [e for e in events if isinstance(e, SummaryDeadLettered)]
        covered += sum(e.messages_covered for e in events if isinstance(e, SummaryUpdated))
    assert letters == []
    pending = sum(len(t.pending) for t in state.tracks.values())
    assert covered + pending == 2 * 60  # each kind summarised or still holds every message


async def test_a_short_summary_keeps_room_for_the_summary_it_rolls_on(server):
    # counted from the new messages alone, twenty turns of "ok" held an 80-word summary to 15 words
    previous = " ".join(["Ann and Bo plan a trip to Lisbon in May and book a flat near the river."] * 5)
    server.answer = text(previous)
    events, _ = await handled(Summarizer(Settings()), due_short(previous, content="ok"), said(20, "ok"))
    assert asked_words(server.requests[0]) > 60
    assert [len(e.content.split()) > 60 for e in events] == [True]


def cut(content: str):
    return completion(
        choices=[{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "length"}]
    )


async def test_a_summary_cut_at_max_tokens_is_asked_again_for_half_the_words(server):
    replies = [cut("Ann and Bo met in"), text("Ann and Bo met in Lisbon.")]
    server.answer = lambda _body: replies.pop(0)
    events, _ = await handled(Summarizer(Settings()), due_short(), said(20, "Bo moved to Porto."))
    first, second = (asked_words(r) for r in server.requests)
    assert second == first // 2
    assert [e.content for e in events] == ["Ann and Bo met in Lisbon."]


async def test_a_summary_cut_twice_is_a_dead_letter_naming_the_setting_not_a_summary_stored_cut(server):
    server.answer = cut("Ann and Bo met in")
    events, _ = await handled(Summarizer(Settings()), due_short(), said(20, "Bo moved to Porto."))
    assert [type(e) for e in events] == [SummaryDeadLettered]
    assert "PEERLOG_LLM_SUMMARIZER_MAX_TOKENS" in events[0].error


REFUSED = {
    "a content filter": (400, "application/json", json.dumps({"error": {"message": FILTERED}}).encode()),
}
UNUSABLE = {"an empty reply": text(""), "a reply cut twice": cut("Ann and Bo met in")}


@pytest.mark.parametrize("reply", UNUSABLE.values(), ids=UNUSABLE.keys())
async def test_a_model_whose_replies_are_always_cut_or_empty_leaves_no_message_out(server, reply):
    # a setting more often than the messages (max_tokens too small, a reasoning model's thinking using it up):
    # taken for a refusal, the messages were left out one by one while the setting stayed wrong
    server.answer = reply
    summarizer, state, events = Summarizer(Settings(summarizer=SummarizerSettings(short_every=4))), None, []
    state = SessionSummaries()
    for seq in range(1, 41):
        step, state = await handled(summarizer, state, said(seq, f"turn {seq}"))
        events += step
    letters = [e for e in events if isinstance(e, SummaryDeadLettered)]
    assert letters and not any(e.dropped for e in letters)


@pytest.mark.parametrize("refusal", REFUSED.values(), ids=REFUSED.keys())
async def test_one_message_the_model_refuses_is_dead_lettered_alone_and_the_next_summary_comes_at_its_cadence(
    server, refusal
):
    # sent first in every later call, it held each kind back until the byte bound dropped hundreds of
    # messages with it: 1,500 messages, the first short summary at message 650, 474 dropped unsummarised
    server.answer = lambda body: refusal if "POISON" in json.dumps(body) else text("A summary.")
    settings = Settings(summarizer=SummarizerSettings(short_every=4, long_every=8))
    summarizer, state, events = Summarizer(settings), SessionSummaries(), []
    for seq in range(1, 50):
        step, state = await handled(summarizer, state, said(seq, "POISON" if seq == 3 else f"turn {seq}"))
        events += step
    letters = [e for e in events if isinstance(e, SummaryDeadLettered) and e.dropped]
    assert [(e.kind, e.last_seq, "message m3 (seq 3)" in e.error) for e in letters] == [
        (SummaryKind.SHORT, 3, True),
        (SummaryKind.LONG, 3, True),
    ]
    for kind, every in ((SummaryKind.SHORT, 4), (SummaryKind.LONG, 8)):
        mine = [e for e in events if isinstance(e, SummaryUpdated) and e.kind == kind]
        assert sum(e.messages_covered for e in mine) == 48  # every other message, once
        after = [e.last_seq for e in mine if e.last_seq > 3]
        assert [b - a for a, b in pairwise(after)] == [every] * (len(after) - 1)
        assert after[-1] == 49


@pytest.mark.parametrize(
    "off", [Configuration(reasoning=False), Configuration(summaries=False)], ids=["reasoning off", "summaries off"]
)
async def test_a_message_set_to_reasoning_false_before_its_summary_is_never_sent_to_the_summary_model(server, off):
    # the setting governs what is read of the message from now: still pending, its text went in the summary
    server.answer = text("A summary.")
    summarizer, state, events = Summarizer(Settings()), SessionSummaries(), []
    for seq in range(1, 22):
        step, state = await handled(summarizer, state, said(seq, "my card is 4111 1111" if seq == 5 else f"turn {seq}"))
        events += step
        if seq == 10:
            configured = MessageConfigured(
                workspace_id="w", session_id="s", message_id="m5", configuration=off, producer=P
            )
            step, state = await handled(summarizer, state, configured)
            events += step
    assert [(e.kind, e.last_seq, e.messages_covered) for e in events] == [(SummaryKind.SHORT, 21, 20)]
    assert server.requests and not any("4111" in json.dumps(r) for r in server.requests)
