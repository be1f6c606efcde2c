"""What a model sends that no store takes (a NUL, a lone surrogate, a runaway text) or a vector it cannot
give ends each processor's input as a repair, a dead letter, a failed dream or a message without a vector:
never an exception out of `handle`, which stops the worker and meets the same reply on every restart."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from services.bus.takeover import TransactionFailed
from services.deriver.batching import PendingMessage
from services.deriver.derive import Deriver
from services.deriver.prompt import FACT_CHARS
from services.deriver.settings import DeriverSettings
from services.dreamer import agent as dreamer_agent
from services.embedder.agent import Coalescer, EmbedderProcessor
from services.events import (
    DerivationDeadLettered,
    DreamFailed,
    DreamReason,
    DreamRequested,
    MessageAppended,
    ObservationAdded,
    ProducerInfo,
    SummaryKind,
    SummaryUpdated,
    encode,
)
from services.events.pairs import Pair
from services.llm.client import ModelClient
from services.llm.errors import EmbeddingError, ModelRequestRejected, ModelUnavailable
from services.llm.settings import ModelStageSettings
from services.settings import Settings
from services.summarizer.agent import Summarizer
from services.summarizer.policy import MIN_CHARS, Line, SessionSummaries, Track, clip_words
from services.toolloop.registry import parse_arguments
from tests.support.mock_model import BASE_URL, MockModel, completion, text

NOW = datetime(2026, 1, 1, tzinfo=UTC)
P = ProducerInfo(component="test", version="0")
GOOD = {"content": "alice teaches piano.", "message_id": "m1", "span": "I teach piano"}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> MockModel:
    mock = MockModel()
    mock.install(monkeypatch)
    return mock


class UnitVectors:
    """An embedder giving every text the same unit vector; `refuse` texts get ModelRequestRejected."""

    model_name, dimensions = "unit", 4

    def __init__(self, refuse: str | None = None, failure: Exception | None = None) -> None:
        self.refuse, self.failure = refuse, failure
        self.calls: list[list[str]] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.failure is not None:
            raise self.failure
        if self.refuse is not None and any(self.refuse in t for t in texts):
            raise ModelRequestRejected("embedding", 400, "input is longer than the context")
        return [[1.0, 0.0, 0.0, 0.0] for _ in texts]

    def embed_sync(self, texts):  # pragma: no cover - the processors are async
        raise NotImplementedError


class KeysSeen:
    """The deriver's duplicate lookups: records the keys, finds nothing."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    async def candidates(self, pair, keys, embeddings, sessions):
        self.keys += keys
        return []

    async def retired(self, pair, observation_ids):
        return set()


def deriver(store: KeysSeen) -> Deriver:
    async def emit(events):
        pass

    settings = ModelStageSettings(base_url=BASE_URL, max_retries=0, model="m")
    return Deriver(DeriverSettings(output_attempts=1), ModelClient("deriver", settings), UnitVectors(), store, emit)


async def derive(server: MockModel, store: KeysSeen, *facts: dict) -> list:
    """The deriver's events for one message, the model answering `facts` in turn (the last one after)."""
    replies = [text(json.dumps({"facts": [fact]})) for fact in facts]
    server.answer = lambda _body: replies.pop(0) if len(replies) > 1 else replies[0]
    window = [
        PendingMessage(
            message_id="m1",
            session_id="s1",
            seq=1,
            content="I moved to Berlin and I teach piano.",
            created_at=NOW,
            tokens=9,
            perceived_at=NOW,
        )
    ]
    outcome = await deriver(store).derive(Pair("w", "alice", "alice", ""), window, [], "cause")
    for event in outcome.events:
        encode(event)  # what the runner does: it must not fail
    return outcome.events


@pytest.mark.parametrize("field", ["content", "span", "message_id"])
async def test_a_fact_holding_a_nul_is_sent_back_for_repair_and_the_repaired_one_is_kept(server, field):
    with_nul = {**GOOD, field: GOOD[field][:5] + "\x00" + GOOD[field][5:]}
    events = await derive(server, KeysSeen(), with_nul, GOOD)
    (added,) = [e for e in events if isinstance(e, ObservationAdded)]
    assert added.content == GOOD["content"]
    repair = server.requests[1]["messages"][-1]["content"]
    assert f"facts.0.{field}" in repair and "NUL" in repair


@pytest.mark.parametrize(
    "bad",
    [
        {**GOOD, "content": "x" * (FACT_CHARS + 1)},
        {**GOOD, "span": "I teach piano" * 200},
        {**GOOD, "span": "I teach\x00 piano"},  # would be an ObservationRejected carrying the NUL
        {**GOOD, "message_id": "m\x00"},
    ],
)
async def test_a_fact_over_its_length_or_holding_a_nul_twice_is_dead_lettered_not_stored(server, bad):
    store = KeysSeen()
    events = await derive(server, store, bad)
    assert [type(e) for e in events] == [DerivationDeadLettered]
    assert store.keys == []


def test_tool_arguments_holding_a_lone_surrogate_are_refused():
    with pytest.raises(ValueError, match="lone surrogate"):
        parse_arguments('{"entries": ["IDENTITY: Bob \\ud800"]}')
    with pytest.raises(ValueError, match="lone surrogate"):
        parse_arguments({"k\udc00": 1})


class NoReads:
    unavailable: tuple[type[Exception], ...] = ()

    async def opening(self, scope, limit):
        return [], []

    async def named_observations(self, scope, derivation, ids, content=""):
        return {}

    async def current_derivation(self, **pair):
        return ""

    async def newest_observations(self, *args):
        return []

    async def nearest_observations(self, *args):
        return []


class QuietEmitter:
    def __init__(self, *args) -> None:
        pass

    async def emit(self, events) -> None:
        pass


def tool_call(name: str, arguments: str):
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return completion({"role": "assistant", "content": None, "tool_calls": [call]})


async def dream(server: MockModel, monkeypatch: pytest.MonkeyPatch, embedder, first_reply, reads=None) -> list:
    """The events of one dream whose model first answers `first_reply`, then stops."""
    monkeypatch.setattr(dreamer_agent, "Emitter", QuietEmitter)
    monkeypatch.setattr(dreamer_agent, "make_embedder", lambda _settings: embedder)
    replies = [first_reply]
    server.answer = lambda _body: replies.pop(0) if replies else text("done")
    requested = DreamRequested(
        workspace_id="w",
        observer_id="bob",
        observed_id="bob",
        dream_id="d1",
        reason=DreamReason.FORCED,
        new_explicit=0,
        producer=P,
    )
    step = await dreamer_agent.Dreamer(Settings(), reads or NoReads()).handle(lambda _key: None, requested)
    for event in step.events:
        encode(event)  # what the runner does: it must not fail
    return step.events


async def test_an_embedding_model_answering_wrongly_mid_dream_ends_it_as_failed(server, monkeypatch):
    refusing = UnitVectors(failure=EmbeddingError("model 'e' returned 2 dimensions, settings say 4"))
    call = tool_call("add_deduction", json.dumps({"premise_ids": [], "content": "Bob likes tea"}))
    events = await dream(server, monkeypatch, refusing, call)
    assert isinstance(events[-1], DreamFailed) and "2 dimensions" in events[-1].reason


class StoreAway(Exception):
    """How a store's reads say it is out of reach (for Postgres: projections.outages.DATABASE_AWAY)."""


class ReadsGoingAway(NoReads):
    unavailable = (StoreAway,)

    async def newest_observations(self, *args):
        raise StoreAway("connection refused")


async def test_a_dream_whose_store_goes_away_is_dreamt_again_not_the_end_of_the_worker(server, monkeypatch):
    # a Postgres restart mid-dream raised out of the runner as a processor's bug: the worker, with the
    # router, deriver and summarizer in it, stopped
    call = tool_call("recent_observations", json.dumps({}))
    with pytest.raises(TransactionFailed, match="out of reach: connection refused"):
        await dream(server, monkeypatch, UnitVectors(), call, reads=ReadsGoingAway())


async def test_a_peer_card_written_with_a_lone_surrogate_escape_is_refused_and_the_dream_completes(server, monkeypatch):
    call = tool_call("set_peer_card", json.dumps({"entries": ["IDENTITY: Bob \\ud800"]}).replace("\\\\", "\\"))
    events = await dream(server, monkeypatch, UnitVectors(), call)
    assert [type(e).__name__ for e in events] == ["DreamCompleted"]


def summarizer_state() -> SessionSummaries:
    line = Line(
        message_id="m1", seq=1, peer_id="ann", content="Ann and Bo met in Lisbon last May, at a friend's party."
    )
    return SessionSummaries(tracks={SummaryKind.SHORT: Track(pending=(line,))})


def message_event() -> MessageAppended:
    return MessageAppended(
        workspace_id="w", session_id="s", message_id="m1", peer_id="ann", content="hi", created_at=NOW, producer=P
    )


async def test_a_summary_holding_a_nul_or_a_lone_surrogate_is_stored_without_them(server):
    server.answer = text("Ann met \x00Bo in Lisbon \ud800.")
    summary, _ = await Summarizer(Settings()).summarise(summarizer_state(), SummaryKind.SHORT, message_event())
    assert isinstance(summary, SummaryUpdated)
    assert summary.content == "Ann met Bo in Lisbon \ufffd."
    encode(summary)


def test_a_summary_without_spaces_is_clipped_by_characters_too():
    assert len(clip_words("x" * 1_000_000, 3000)) == 30_000
    assert len(clip_words("y" * 1000, 1)) == MIN_CHARS  # a short limit still keeps a long word
    assert clip_words("a b c d", 2) == "a b"


def appended(message_id: str, content: str) -> MessageAppended:
    return MessageAppended(
        workspace_id="w",
        session_id=f"s-{message_id}",
        message_id=message_id,
        peer_id="ann",
        content=content,
        created_at=NOW,
        producer=P,
    )


async def test_a_text_the_embedding_model_refuses_goes_without_a_vector_and_its_batch_mates_keep_theirs():
    model = UnitVectors(refuse="HUGE")
    processor = EmbedderProcessor(model)
    events = [appended("m1", "hello"), appended("m2", "HUGE essay"), appended("m3", "bye")]
    steps = await asyncio.gather(*(processor.handle(lambda _key: None, e) for e in events))
    assert [len(step.events) for step in steps] == [1, 0, 1]
    assert all(step.states for step in steps)  # the session's previous turn moves on either way
    assert len(model.calls[0]) == 3  # one coalesced call first, then halves to find the refused text


@pytest.mark.parametrize(
    "failure",
    [
        ModelUnavailable("embedding", 4, TimeoutError()),  # an outage: the batch is retried
        ModelRequestRejected("embedding", 401, "bad key"),  # every text refused: a wrong setting, not a text
        EmbeddingError("model 'e' returned 2 dimensions, settings say 4"),
    ],
)
async def test_a_model_that_fails_every_text_fails_the_batch_instead_of_skipping_every_vector(failure):
    coalescer = Coalescer(UnitVectors(failure=failure))
    results = await asyncio.gather(coalescer.embed("a"), coalescer.embed("b"), return_exceptions=True)
    assert all(r is failure for r in results)


@pytest.mark.parametrize(
    "failure",
    [
        ModelUnavailable("embedding", 4, TimeoutError()),
        ModelRequestRejected("embedding", 401, "bad key"),
        EmbeddingError("model 'e' returned 2 dimensions, settings say 4"),
    ],
)
async def test_an_embedding_model_failing_every_text_restarts_the_embedder_not_the_worker(failure):
    # raised as it was, an embedding outage ended the worker and every processor in it
    processor = EmbedderProcessor(UnitVectors(failure=failure))
    with pytest.raises(TransactionFailed, match="the embedding model failed"):
        await processor.handle(lambda _key: None, appended("m1", "hello"))


async def test_a_reembed_leaves_out_a_text_the_model_refuses_and_embeds_everything_after_it():
    # one refused text stopped every run at the same chunk: nothing after it was ever embedded
    from services.embedder.reembed import CHUNK, Plan, reembed

    texts = [f"turn {i}" for i in range(CHUNK + 10)]
    texts[3] = "HUGE essay"
    messages = [appended(f"m{i}", text).model_copy(update={"session_id": "s"}) for i, text in enumerate(texts)]
    the_plan = Plan(messages={"s": [(m, m.content) for m in messages]})
    written: list = []

    async def append(events) -> None:
        written.extend(events)

    done = await reembed(the_plan, UnitVectors(refuse="HUGE"), append, lambda _n: None)
    ids = [m.message_id for event in written for m in event.messages]
    assert done == len(ids) == CHUNK + 9 and "m3" not in ids and ids[-1] == f"m{CHUNK + 9}"
