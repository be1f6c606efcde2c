"""Derive one window of a pair's messages: model call, embeddings, de-duplication lookups, judgement.

I/O lives here; every decision is in judge.py and batching.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from services.deriver.batching import PendingMessage
from services.deriver.judge import KnownObservation, Withhold, batch_id, judge
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
from services.llm.client import ModelClient
from services.llm.embeddings import Embedder, near_duplicate_similarity
from services.llm.errors import EmbeddingError, ModelError, ModelOutputInvalid, shown

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
            completion = await self._extract(pair, window, bid)
            return await self._judge(pair, window, recent, completion, base, started, withhold)
        except INFRASTRUCTURE as exc:
            log.warning("batch %s dead-lettered: %s", bid, exc)
            attempts = getattr(exc, "attempts", None) or self.model.settings.max_retries + 1
            return BatchOutcome(
                [
                    DerivationDeadLettered(
                        producer=self.producer(), error=shown(exc)[:4000], attempts=max(1, attempts), **base
                    )
                ],
                recent,
            )

    async def _extract(self, pair: Pair, window: Sequence[PendingMessage], bid: str):
        """The model's extraction, asked again from the start when a reply and its repair both fail to
        validate: a model that answers garbage now and then (a small local one, a provider's bad minute)
        parks no batch for an operator to retry; one that always does parks it after `output_attempts`."""
        asked = build_messages(pair.observer_id, pair.observed_id, window)
        for _ in range(self.settings.output_attempts - 1):
            try:
                return await self.model.structured(asked, Extraction, name="extraction")
            except ModelOutputInvalid as exc:
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
