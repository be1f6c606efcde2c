"""The summarizer's shell against a model server's answers: what shrinks a call's room, what a working model
summarises before the byte bound drops anything, how long a rolling summary may stay, and a cut reply."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from services.events import MessageAppended, ProducerInfo, SummaryDeadLettered, SummaryKind, SummaryUpdated
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


async def handled(summarizer: Summarizer, state: SessionSummaries, event: MessageAppended):
    step = await summarizer.handle(lambda _key: state.model_dump(mode="json"), event)
    return step.events, SessionSummaries.model_validate(step.states[event.key])


def asked_words(request: dict) -> int:
    return int(re.search(r"at most (\d+) words", request["messages"][0]["content"]).group(1))


REFUSALS = {
    "a wrong key": (401, "invalid api key", None),
    "a wrong model name": (404, "model 'x' not found", None),
    "max_tokens over the model's limit": (400, "max_tokens must be less than or equal to 8192", None),
    "max_tokens not taken": (400, "Unsupported parameter: 'max_tokens'; use 'max_completion_tokens'", None),
    "a prompt past the context": (400, "This model's maximum context length is 4096 tokens", 3000),
}


@pytest.mark.parametrize("status,body,room", REFUSALS.values(), ids=REFUSALS.keys())
async def test_only_a_prompt_past_the_models_context_halves_a_calls_room(server, status, body, room):
    # any 4xx halved it, for good: after a wrong key was fixed, each summary covered one message
    server.answer = (status, "application/json", json.dumps({"error": {"message": body}}).encode())
    events, state = await handled(Summarizer(Settings()), due_short(), said(20, "Bo moved to Porto."))
    assert isinstance(events[0], SummaryDeadLettered)
    assert (state.tracks[SummaryKind.SHORT].room or None) == room


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
