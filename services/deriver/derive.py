"""Derive one window of a pair's messages: model call, embeddings, de-duplication lookups, judgement.

I/O lives here; every decision is in judge.py, batching.py and pieces.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from services.deriver.batching import PendingMessage
from services.deriver.judge import KnownObservation, Withhold, batch_id, judge
from services.deriver.pieces import MAX_PIECES, Window, halves, parked
from services.deriver.ports import DuplicateCandidates, StoreUnavailable
from services.deriver.prompt import PROMPT_VERSION, Extraction, build_messages
from services.deriver.settings import DeriverSettings
from services.events import (
    BatchDerived,
    DerivationDeadLettered,
    DerivationStarted,
    Event,
    ObservationSuperseded,
    ProducerInfo,
    new_id,
)
from services.events.pairs import Pair
from services.events.text import normalise
from services.llm.client import Completion, ModelClient, Usage
from services.llm.embeddings import Embedder, near_duplicate_similarity
from services.llm.errors import EmbeddingError, ModelError, ModelOutputCut, ModelOutputInvalid, shown

log = logging.getLogger(__name__)
VERSION = "0.1.0"
# what a batch may fail on that is not the deriver's fault: the chat or embedding model (each already
# retried by its client), the projections (retried by the store). The batch is parked, the worker goes on
INFRASTRUCTURE = (ModelError, EmbeddingError, StoreUnavailable)


@dataclass(frozen=True)
class BatchOutcome:
    events: list[Event]
    recent: list[KnownObservation]  # the pair's recent live observations after this batch, oldest first


class Deriver:
    def __init__(
        self,
        settings: DeriverSettings,
        model: ModelClient,
        embedder: Embedder,
        store: DuplicateCandidates,
        emit,
        reinforce_clients: bool = True,  # False in a re-derivation: see judge()
    ) -> None:
        self.settings, self.model, self.embedder, self.store, self.emit = settings, model, embedder, store, emit
        self.reinforce_clients = reinforce_clients
        self.near_duplicate = settings.near_duplicate or near_duplicate_similarity(embedder.model_name)

    def producer(self, model: str | None = None) -> ProducerInfo:
        return ProducerInfo(
            component="deriver",
            version=VERSION,
            model=model or self.model.settings.model,
            prompt_version=PROMPT_VERSION,
        )

    async def derive(
        self,
        pair: Pair,
        window: Sequence[PendingMessage],
        recent: list[KnownObservation],
        cause: str | None,
        withhold: Withhold | None = None,
    ) -> BatchOutcome:
        """The batch's events and the pair's recent observations after it; `withhold`: see judge()."""
        ids = tuple(p.message_id for p in window)
        bid = batch_id(pair.workspace_id, pair.observer_id, pair.observed_id, ids, pair.derivation)
        base = {**pair.fields(), "batch_id": bid, "message_ids": ids, "causation_id": cause}
        # visible at once (outside this batch's transaction), so status can show the batch in flight
        await self.emit([DerivationStarted(producer=self.producer(), **base)])
        started = time.monotonic()
        try:
            pieces = await self._pieces(pair, tuple(window), bid, MAX_PIECES)
            return await self._settle(pair, window, recent, pieces, base, started, withhold)
        except INFRASTRUCTURE as exc:
            return BatchOutcome([self._dead_letter(exc, base)], recent)

    async def _settle(self, pair, window, recent, pieces, base, started, withhold) -> BatchOutcome:
        """The window's events once each of its pieces is asked: one batch when every piece fitted a reply,
        parked whole (as before a window was split) when no message's pieces all did, else `_partly`."""
        unfit = [got for _, got in pieces if isinstance(got, ModelOutputInvalid)]
        done, out = parked(window, [piece for piece, got in pieces if isinstance(got, ModelOutputInvalid)])
        if not done:
            return BatchOutcome([self._dead_letter(unfit[0], base)], recent)
        # a fitted piece of a parked message is dropped with it: a retry derives the message whole
        ids = {p.message_id for p in done}
        kept = merged(
            [got for piece, got in pieces if isinstance(got, Completion) and {p.message_id for p in piece} <= ids]
        )
        if not out:
            return await self._judge(pair, window, recent, kept, base, started, withhold)
        return await self._partly(pair, done, out, recent, kept, base, started, withhold, unfit[0])

    def _dead_letter(self, exc: Exception, base: dict) -> DerivationDeadLettered:
        log.warning("batch %s (%d messages) dead-lettered: %s", base["batch_id"], len(base["message_ids"]), exc)
        attempts = getattr(exc, "attempts", None) or self.model.settings.max_retries + 1
        return DerivationDeadLettered(
            producer=self.producer(), error=shown(exc)[:4000], attempts=max(1, attempts), **base
        )

    async def _partly(self, pair, done, out, recent, completion, base, started, withhold, why) -> BatchOutcome:
        """A window some of whose messages never fitted a reply: the others derived as a batch of their own, and
        the window's batch (its start already shown in flight) parked with the messages that did not fit, so
        that status lists them and `derivations retry` derives them."""
        ids = tuple(p.message_id for p in done)
        own = {
            **base,
            "message_ids": ids,
            "batch_id": batch_id(pair.workspace_id, pair.observer_id, pair.observed_id, ids, pair.derivation),
        }
        derived = await self._judge(pair, done, recent, completion, own, started, withhold)
        rest = self._dead_letter(why, {**base, "message_ids": tuple(p.message_id for p in out)})
        begun = DerivationStarted(producer=self.producer(), **own)
        return BatchOutcome([begun, *derived.events, rest], derived.recent)

    async def _pieces(
        self, pair: Pair, window: Window, bid: str, budget: int, lost: set[str] | None = None
    ) -> list[tuple[Window, Completion | ModelOutputInvalid]]:
        """Each piece of `window` with its extraction, or with the error of a reply that stopped at max_tokens
        when the piece could be split no further: a window whose facts do not fit one reply is asked again in
        halves (see pieces.py), into at most `budget` pieces. `lost`: messages with a piece that never fitted,
        whose other pieces are not asked (a message is parked whole)."""
        lost = set() if lost is None else lost
        if any(p.message_id in lost for p in window):
            return []
        try:
            return [(window, await self._extract(pair, window, bid))]
        except ModelOutputInvalid as exc:
            if not self.cut(exc):
                raise
            split = halves(window) if budget > 1 else None
            if split is None:
                lost.update(p.message_id for p in window)
                return [(window, exc)]
            log.info("batch %s: the facts of %d message(s) did not fit one reply; asking in halves", bid, len(window))
            (first, second), half = split, budget // 2
            return [
                *await self._pieces(pair, first, bid, half, lost),
                *await self._pieces(pair, second, bid, budget - half, lost),
            ]

    @staticmethod
    def cut(exc: ModelOutputInvalid) -> bool:
        """Whether the reply stopped at max_tokens before it was whole: asking the same again would stop there
        again."""
        return isinstance(exc, ModelOutputCut)

    async def _extract(self, pair: Pair, window: Sequence[PendingMessage], bid: str):
        """The model's extraction, asked again from the start when a reply and its repair both fail to
        validate: a model that answers garbage now and then (a small local one, a provider's bad minute)
        parks no batch for an operator to retry; one that always does parks it after `output_attempts`."""
        asked = build_messages(pair.observer_id, pair.observed_id, window)
        for _ in range(self.settings.output_attempts - 1):
            try:
                return await self.model.structured(asked, Extraction, name="extraction")
            except ModelOutputInvalid as exc:
                if self.cut(exc):  # it would stop at max_tokens again: the window is split instead
                    raise
                log.info("batch %s: no valid extraction (%s); asking again", bid, exc.error[:200])
        return await self.model.structured(asked, Extraction, name="extraction")

    async def _candidates(self, pair, window, facts, embeddings) -> list[KnownObservation]:
        """The stored observations each fact may duplicate, looked for in its message's session."""
        session_of = {p.message_id: p.session_id for p in window}
        keys = [normalise(f.content) for f in facts]
        return await self.store.candidates(pair, keys, embeddings, [session_of.get(f.message_id, "") for f in facts])

    async def _judge(self, pair, window, recent, completion, base, started, withhold=None) -> BatchOutcome:
        facts = completion.value.facts
        embeddings = await self.embedder.embed([f.content for f in facts]) if facts else []
        stored = await self._candidates(pair, window, facts, embeddings) if facts else []
        if facts and recent:
            # the cache outlives a DeleteObservation or a dream's supersession: a fact matched to a retired
            # observation would only reinforce it, and stay out of every read
            gone = await self.store.retired(pair, [k.observation_id for k in recent])
            recent = [k for k in recent if k.observation_id not in gone]
        # the store's row wins over the cache's copy of it: the store is what the projections hold now
        known = {k.observation_id: k for k in [*recent, *stored]}
        producer = self.producer(completion.model)
        verdicts = judge(
            pair,
            facts,
            embeddings,
            window,
            list(known.values()),
            batch=base["batch_id"],
            threshold=self.near_duplicate,
            embedding_model=self.embedder.model_name,
            producer=producer,
            cause=base["causation_id"],
            new_id=new_id,
            reinforce_clients=self.reinforce_clients,
            withhold=withhold,
        )
        done = BatchDerived(
            producer=producer,
            added=verdicts.added,
            reinforced=verdicts.reinforced,
            superseded=verdicts.superseded,
            rejected=verdicts.rejected,
            model=completion.model,
            prompt_version=PROMPT_VERSION,
            prompt_tokens=completion.usage.prompt_tokens,
            completion_tokens=completion.usage.completion_tokens,
            duration_ms=int((time.monotonic() - started) * 1000),
            **base,
        )
        superseded = {e.observation_id for e in verdicts.events if isinstance(e, ObservationSuperseded)}
        live = [k for k in [*recent, *verdicts.new_known] if k.observation_id not in superseded]
        return BatchOutcome([*verdicts.events, done], live)


def merged(completions: list[Completion]) -> Completion:
    """The extractions of a window's pieces as one: their facts in order, their costs summed."""
    if len(completions) == 1:
        return completions[0]
    facts = [f for c in completions for f in c.value.facts]
    usage = sum((c.usage for c in completions), Usage())
    attempts = sum(c.attempts for c in completions)
    return Completion(Extraction(facts=facts), "", completions[0].model, usage, attempts)
