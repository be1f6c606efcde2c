"""A window whose facts do not fit the deriver's max_tokens is derived in pieces, not parked whole."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from types import SimpleNamespace

from services.deriver.batching import PendingMessage
from services.deriver.derive import Deriver
from services.deriver.judge import batch_id
from services.deriver.pieces import MAX_PIECES, MIN_PIECE_CHARS, halves
from services.deriver.settings import DeriverSettings
from services.events import BatchDerived, DerivationDeadLettered, DerivationStarted, ObservationAdded
from services.events.pairs import Pair
from services.llm.client import ModelClient
from services.llm.settings import ModelStageSettings
from tests.support.extractor import is_deriver, target_turns
from tests.support.model_server import ModelServer, Reply

PAIR = Pair("w", "a", "a")
AT = datetime(2026, 1, 1, tzinfo=UTC)
FITS = 500  # characters of target turns whose facts fit one reply of the model below


def message(i: int, text: str) -> PendingMessage:
    return PendingMessage(
        message_id=f"m{i}", session_id="s", seq=i, content=text, created_at=AT, tokens=len(text) // 4, perceived_at=AT
    )


def sentences(first: int, n: int) -> list[str]:
    return [f"I visited city{i} in spring and loved its harbour{i}." for i in range(first, first + n)]


def dense_model(request: dict) -> Reply:
    """One fact per sentence of each target turn; a reply over more than FITS characters of turns (or holding
    "lorem", which never fits) stops at max_tokens mid-way, as a real model's list of facts does."""
    turns = target_turns(request)
    if sum(len(text) for _, text in turns) > FITS or any("lorem" in text for _, text in turns):
        return Reply(content='{"facts": [{"content": "The target vis', finish_reason="length")
    facts = [
        {"content": f"The target said: {s}", "message_id": mid, "span": s}
        for mid, text in turns
        for s in (found.strip() for found in re.findall(r"[^.]+\.", text))
    ]
    return Reply(content={"facts": facts})


class NoStore:
    async def candidates(self, pair, keys, embeddings, sessions):
        return []

    async def retired(self, pair, ids):
        return set()


async def embed(texts):
    # one axis per fact: no two are near duplicates of each other
    return [tuple(1.0 if j == i else 0.0 for j in range(len(texts))) for i in range(len(texts))]


def derive(window: list[PendingMessage]) -> tuple[list, int]:
    """The window's events from a deriver asking `dense_model`, and the model calls it made."""
    with ModelServer() as server:
        server.reply_with(dense_model)

        async def run():
            async with ModelClient("deriver", ModelStageSettings(base_url=server.base_url, max_retries=0)) as model:
                embedder = SimpleNamespace(model_name="e", embed=embed)

                async def emit(events):
                    pass

                deriver = Deriver(DeriverSettings(), model, embedder, NoStore(), emit)
                return await deriver.derive(PAIR, window, [], None)

        outcome = asyncio.run(run())
        calls = [r for r in server.chat_requests() if is_deriver(r)]
    return outcome.events, len(calls)


def said(events) -> list[str]:
    return [e.content.removeprefix("The target said: ") for e in events if isinstance(e, ObservationAdded)]


def test_a_window_whose_facts_overflow_max_tokens_is_split_and_derived_not_dead_lettered():
    paragraphs = [" ".join(sentences(i * 4, 4)) for i in range(6)]  # ~1,300 characters: three times what fits
    window = [message(0, "\n\n".join(paragraphs))]
    events, calls = derive(window)
    assert not [e for e in events if isinstance(e, DerivationDeadLettered)]
    assert sorted(said(events)) == sorted(sentences(0, 24))
    assert all(e.sources[0].message_id == "m0" for e in events if isinstance(e, ObservationAdded))
    done = [e for e in events if isinstance(e, BatchDerived)]
    assert [(d.batch_id, d.message_ids, d.added) for d in done] == [(batch_id("w", "a", "a", ["m0"]), ("m0",), 24)]
    assert calls <= 2 * MAX_PIECES - 1


def test_a_message_whose_facts_never_fit_is_dead_lettered_alone_and_the_other_messages_facts_are_kept():
    hostile = " ".join(["lorem ipsum dolor sit amet."] * 60)  # never fits, however small the piece
    window = [message(0, " ".join(sentences(0, 3))), message(1, hostile), message(2, " ".join(sentences(3, 3)))]
    events, calls = derive(window)
    assert sorted(said(events)) == sorted(sentences(0, 6))
    parked = [e for e in events if isinstance(e, DerivationDeadLettered)]
    # the window's own batch (shown in flight when it began) is parked, with the message that did not fit only
    assert [(e.batch_id, e.message_ids) for e in parked] == [(batch_id("w", "a", "a", ["m0", "m1", "m2"]), ("m1",))]
    assert "stopped at max_tokens" in parked[0].error
    done = [e for e in events if isinstance(e, BatchDerived)]
    derived = batch_id("w", "a", "a", ["m0", "m2"])
    assert [(d.batch_id, d.message_ids, d.added) for d in done] == [(derived, ("m0", "m2"), 6)]
    assert [e.batch_id for e in events if isinstance(e, DerivationStarted)] == [derived]
    # the window, its halves, and the hostile message's pieces until its first piece that never fits
    assert calls <= 2 * MAX_PIECES - 1


def test_a_long_message_is_cut_at_a_paragraph_before_a_sentence_and_each_piece_is_part_of_it():
    text = " ".join(sentences(0, 5)) + "\n\n" + " ".join(sentences(5, 9))
    first, second = halves([message(0, text)])
    assert first[0].content == " ".join(sentences(0, 5)) and second[0].content == " ".join(sentences(5, 9))
    no_paragraphs = " ".join(sentences(0, 14))
    pieces = halves([message(0, no_paragraphs)])
    assert all(p[0].content in no_paragraphs and p[0].content.endswith(".") for p in pieces)
    assert all(p[0].message_id == "m0" for p in pieces)


def test_a_message_too_short_to_cut_in_two_pieces_of_the_least_size_is_not_split():
    assert halves([message(0, "x. " * (MIN_PIECE_CHARS // 3))]) is None
    assert halves([message(0, "y" * 10 * MIN_PIECE_CHARS)]) is None  # no boundary to cut at
