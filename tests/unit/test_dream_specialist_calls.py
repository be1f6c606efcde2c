"""A dream specialist's turn runs at most `PEERLOG_DREAM_MAX_CALLS_PER_ROUND` of its tool calls, and the
short names it cites resolve to the observations it was shown, whatever ids the client chose."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from services.dreamer import agent as dreamer_agent
from services.dreamer.settings import DreamSettings
from services.events import DreamReason, DreamRequested, ObservationSuperseded, ProducerInfo
from services.settings import Settings
from tests.support.mock_model import MockModel, completion, text
from tests.unit.test_processors_survive_bad_model_output import QuietEmitter, UnitVectors

NOW = datetime(2026, 1, 10, tzinfo=UTC)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> MockModel:
    mock = MockModel()
    mock.install(monkeypatch)
    return mock


def row(observation_id: str, content: str) -> dict:
    return dict(
        observation_id=observation_id,
        observer_id="bob",
        observed_id="bob",
        level="explicit",
        content=content,
        created_at=NOW,
        superseded_by=None,
        deleted_at=None,
        derivation="",
    )


class Store:
    """The pair's explicit observations, oldest first (the opening shows them so: #1 is the first)."""

    def __init__(self, rows: list[dict], opening: bool = True) -> None:
        self.rows = {r["observation_id"]: r for r in rows}
        self.shown_first = opening

    async def current_derivation(self, **pair):
        return ""

    async def opening(self, scope, limit):
        newest_first = list(reversed(self.rows.values())) if self.shown_first else []
        return newest_first, []

    async def nearest_observations(self, scope, levels, vector, limit):
        return list(self.rows.values())[:limit]

    async def named_observations(self, scope, derivation, ids, content=""):
        return {i: {**self.rows[i], "premise_ids": []} for i in ids if i in self.rows}  # explicit: no premises


def calls(*arguments: dict, tool: str = "update_knowledge") -> tuple:
    """A turn of `tool` calls, one per `arguments`."""
    tool_calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": tool, "arguments": json.dumps(a)}}
        for i, a in enumerate(arguments)
    ]
    return completion({"role": "assistant", "content": None, "tool_calls": tool_calls})


def search(query: str) -> tuple:
    return calls({"query": query}, tool="search_observations")


async def dream(server, monkeypatch, store: Store, first_turn, dream_settings=None) -> list:
    """The events of one dream whose model first answers `first_turn`, then stops (or answers as
    `first_turn(request)` says)."""
    monkeypatch.setattr(dreamer_agent, "Emitter", QuietEmitter)
    monkeypatch.setattr(dreamer_agent, "make_embedder", lambda _settings: UnitVectors())
    replies = [first_turn]
    server.answer = first_turn if callable(first_turn) else lambda _body: replies.pop(0) if replies else text("done")
    requested = DreamRequested(
        workspace_id="w",
        observer_id="bob",
        observed_id="bob",
        dream_id="d1",
        reason=DreamReason.FORCED,
        new_explicit=0,
        producer=ProducerInfo(component="test", version="0"),
    )
    settings = Settings(dream=dream_settings or DreamSettings())
    step = await dreamer_agent.Dreamer(settings, store).handle(lambda _key: None, requested)
    return step.events


def facts(n: int) -> Store:
    return Store([row(f"fact-{i}", f"Bob fact number {i}") for i in range(n)])


def retire_all_but_the_first(n: int) -> tuple:
    # #1 is fact-0, the anchor every update cites; #2 … #n are retired
    return calls(
        *(
            {"outdated_id": f"#{i}", "content": f"Bob fact {i} no longer holds", "premise_ids": ["#1"]}
            for i in range(2, n + 1)
        )
    )


async def test_one_turn_runs_at_most_max_calls_per_round_and_the_rest_are_told_they_were_not_run(server, monkeypatch):
    events = await dream(server, monkeypatch, facts(30), retire_all_but_the_first(30))
    assert len([e for e in events if isinstance(e, ObservationSuperseded)]) == 16  # the default, not 29
    second = server.requests[1]["messages"]
    results = [m["content"] for m in second if m["role"] == "tool"]
    assert len(results) == 29  # every call of the turn is answered
    assert all(r.startswith("ok: written as") for r in results[:16])
    assert all(r.startswith("not run: at most 16 tool calls") for r in results[16:])


async def test_max_calls_per_round_is_the_dream_setting(server, monkeypatch):
    events = await dream(
        server, monkeypatch, facts(10), retire_all_but_the_first(10), DreamSettings(max_calls_per_round=3)
    )
    superseded = [e.observation_id for e in events if isinstance(e, ObservationSuperseded)]
    assert superseded == ["fact-1", "fact-2", "fact-3"]  # the turn's first three calls, in order


async def test_the_name_a_tool_result_shows_retires_that_observation_even_where_client_ids_look_like_names(
    server, monkeypatch
):
    # a client chose the ids "o2", "o1" and "0"; the specialist meets them in a search result, not the opening
    found = [row("o2", "Bob lives in Oslo"), row("o1", "Bob keeps bees"), row("0", "Bob moved to Bergen")]
    store = Store(found, opening=False)

    def answer(body: dict):
        if "Your job is deduction" not in body["messages"][0]["content"]:
            return text("done")
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not results:
            return search("Bob")
        if len(results) == 1:  # cite the names the result shows on the Oslo and Bergen lines
            name = {line.split(") ", 1)[1]: line[5 : line.index("]")] for line in results[0].splitlines()}
            update = {"outdated_id": name["Bob lives in Oslo"], "content": "Bob lives in Bergen now"}
            return calls({**update, "premise_ids": [name["Bob moved to Bergen"]]})
        return text("done")

    events = await dream(server, monkeypatch, store, answer)
    assert [e.observation_id for e in events if isinstance(e, ObservationSuperseded)] == ["o2"]
    shown = [m["content"] for m in server.requests[2]["messages"] if m["role"] == "tool"][0]
    assert shown.count("[obs:") == 3 and len({line[: line.index("]")] for line in shown.splitlines()}) == 3


async def test_a_dream_whose_pair_is_promoted_while_it_runs_writes_nothing_and_fails_saying_why(server, monkeypatch):
    from services.events import DreamFailed

    class PromotedMeanwhile(Store):
        def __init__(self, rows):
            super().__init__(rows)
            self.asked = 0

        async def current_derivation(self, **pair):
            self.asked += 1
            return "" if self.asked == 1 else "v2"  # the promotion lands after the dream read it

    events = await dream(
        server,
        monkeypatch,
        PromotedMeanwhile([row(f"fact-{i}", f"Bob fact {i}") for i in range(3)]),
        retire_all_but_the_first(3),
    )
    (failed,) = events
    assert isinstance(failed, DreamFailed) and "promoted to derivation 'v2'" in failed.reason
    assert "edits were not written" in failed.reason


async def test_a_dream_whose_pair_is_promoted_and_whose_model_then_fails_writes_nothing(server, monkeypatch):
    from services.events import DreamFailed

    class PromotedMeanwhile(Store):
        asked = 0

        async def current_derivation(self, **pair):
            self.asked += 1
            return "" if self.asked == 1 else "v2"

    turns = [retire_all_but_the_first(3)]
    refused = (400, "application/json", b'{"error": {"message": "the model is gone"}}')
    events = await dream(
        server,
        monkeypatch,
        PromotedMeanwhile([row(f"fact-{i}", f"Bob fact {i}") for i in range(3)]),
        lambda _body: turns.pop(0) if turns else refused,
    )
    # the edits of its first turn were for the derivation reads no longer follow: none is written
    (failed,) = events
    assert isinstance(failed, DreamFailed) and "promoted to derivation 'v2'" in failed.reason
