"""A dream fits a small model's context: its opening shows only the newest observations a token budget holds,
and a specialist whose conversation outgrows the context ends there instead of failing the dream."""

from __future__ import annotations

import pytest

from services.dreamer import specialist
from services.events import DreamCompleted, ObservationSuperseded
from services.llm.tokens import count_tokens
from tests.support.mock_model import MockModel, text
from tests.unit.test_dream_specialist_calls import Store, dream, facts, retire_all_but_the_first, row

# how llama.cpp's server refuses a prompt past its context
PAST_CONTEXT = (
    400,
    "application/json",
    b'{"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it"}}',
)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> MockModel:
    mock = MockModel()
    mock.install(monkeypatch)
    return mock


def job(body: dict) -> str:
    return "deduction" if "Your job is deduction" in body["messages"][0]["content"] else "induction"


async def test_a_specialist_whose_conversation_outgrows_the_model_context_ends_and_induction_still_runs(
    server, monkeypatch
):
    asked = []

    def answer(body: dict):
        asked.append(job(body))
        if asked == ["deduction"]:
            return retire_all_but_the_first(3)
        return PAST_CONTEXT if job(body) == "deduction" else text("done")

    events = await dream(server, monkeypatch, facts(3), answer)
    assert asked == ["deduction", "deduction", "induction"]
    assert [e.observation_id for e in events if isinstance(e, ObservationSuperseded)] == ["fact-1", "fact-2"]
    assert isinstance(events[-1], DreamCompleted) and events[-1].edits == 2


async def test_a_dream_refused_for_another_reason_still_fails(server, monkeypatch):
    from services.events import DreamFailed

    refused = (400, "application/json", b'{"error": {"message": "the model is gone"}}')
    events = await dream(server, monkeypatch, facts(3), lambda _body: refused)
    assert isinstance(events[-1], DreamFailed)


async def test_a_dream_opening_shows_only_the_newest_observations_its_token_budget_holds(server, monkeypatch):
    long = [row(f"fact-{i}", f"Bob fact number {i}. " + "He walks the dog along the river. " * 55) for i in range(60)]
    await dream(server, monkeypatch, Store(long), text("done"))
    opening = server.requests[0]["messages"][1]["content"]
    shown = [line for line in opening.splitlines() if line.startswith("[obs:")]
    assert 0 < len(shown) < 60
    assert "Bob fact number 59." in shown[-1]  # the newest, last as the opening lists oldest first
    assert count_tokens("\n".join(shown)) <= specialist.OPENING_TOKENS


def test_the_opening_keeps_the_newest_rows_until_the_budget_is_spent():
    rows = [{"n": n} for n in (5, 4, 3, 2, 1)]
    assert specialist.newest_within(rows, 10, lambda r: 4) == rows[:2]
    assert specialist.newest_within(rows, 3, lambda r: 4) == []
