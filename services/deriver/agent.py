"""The deriver's shell: perceived messages in, observations out, per-pair state in its changelog."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from services.bus.producer import Emitter
from services.bus.runner import Get, State, Step
from services.bus.topics import PERCEIVED
from services.deriver.batching import Batching, add, ask, take
from services.deriver.derive import Deriver
from services.deriver.judge import KnownObservation
from services.deriver.ports import DuplicateCandidates
from services.deriver.state import dump_recent, load_batching, load_recent
from services.events import DerivationDue, DerivationPromoted, Event, MessagePerceived, ProducerInfo
from services.events.pairs import Pair
from services.events.perception import pair_of
from services.events.stamps import written_now
from services.llm.client import ModelClient
from services.llm.embeddings import make_embedder
from services.llm.tokens import count_tokens

if TYPE_CHECKING:
    from services.settings import Settings

log = logging.getLogger(__name__)
CLOCK = ProducerInfo(component="deriver-clock", version="0.1.0")
RECENT = "#recent"  # suffix of the state key holding a pair's recent observations (same partition)


class DeriverProcessor:
    name = "deriver"
    inputs = (PERCEIVED,)
    max_batch = 32  # pairs in one batch are derived concurrently; a pair's own events stay in order

    def __init__(self, settings: Settings, store: DuplicateCandidates) -> None:
        self.settings = settings.deriver
        self.tick_s = settings.deriver.tick_s
        self.asked: dict[str, tuple[str, datetime]] = {}  # pair key -> (oldest pending message, when) last ticked
        # one side producer for progress markers and clock ticks: both must be visible at once
        self.emitter = Emitter(settings.kafka, "peerlog-deriver")
        self.model = settings.embedding.model  # the recent cache's vectors are of this model
        self.deriver = Deriver(
            settings.deriver,
            ModelClient("deriver", settings.llm.stage("deriver")),
            make_embedder(settings.embedding),
            store,
            self.emitter.emit,
        )

    async def handle(self, get: Get, event: Event) -> Step:
        if not isinstance(event, MessagePerceived | DerivationDue | DerivationPromoted):
            return Step()
        batching = load_batching(get(event.key))
        if isinstance(event, MessagePerceived):
            batching = add(batching, event, count_tokens(event.content))
        # a promotion first derives everything pending into the old derivation: no message changes label
        switch = isinstance(event, DerivationPromoted) and event.derivation != batching.derivation
        recent = load_recent(get(event.key + RECENT), self.model)
        events, batching, recent = await self._drain(event, batching, recent, switch)
        if switch:
            batching, recent = batching.model_copy(update={"derivation": event.derivation}), []
        states: dict[str, State | None] = {event.key: batching.model_dump(mode="json")}
        if events or switch:  # the cache changes only then; rewriting it per message would bloat the changelog
            states[event.key + RECENT] = dump_recent(recent, self.settings.recent_cache, self.model)
        # dated as they commit, together: a window judged before the next window's model call would be dated
        # before a client's write that lands first, and slip behind a page cursor or into a past as_of view
        return Step(written_now(events), states)

    async def _drain(self, event: Event, batching: Batching, recent: list[KnownObservation], everything: bool):
        """Derive the pair's due windows (all of them with `everything`) into its current derivation."""
        events: list[Event] = []
        pair = Pair(event.workspace_id, event.observer_id, event.observed_id, batching.derivation)
        windows, batching = take(batching, event, self.settings, everything)
        for window in windows:
            outcome = await self.deriver.derive(pair, window, recent, event.event_id)
            events += outcome.events
            recent = outcome.recent
        return events, batching, recent

    async def tick(self, states: Mapping[str, State]) -> None:
        """The age limit must fire for a quiet pair too: a tick is an event, derived in-stream."""
        now = datetime.now(UTC)
        pending = {k: load_batching(raw) for k, raw in states.items() if not k.endswith(RECENT) and raw}
        keys = [k for k, b in pending.items() if ask(b, self.settings, now, self.asked.get(k))]
        if keys:
            await self.emitter.emit([DerivationDue(**pair_of(k), producer=CLOCK) for k in keys])
            self.asked.update({k: (pending[k].pending[0].message_id, now) for k in keys})
        # by age, not by this runner's pairs: deriver runners of one worker share this processor
        self.asked = {k: v for k, v in self.asked.items() if (now - v[1]).total_seconds() < self.settings.max_wait_s}


def build(settings: Settings, store: DuplicateCandidates):
    """The processor and its clock; `store` reads the projections (the worker passes deriver_reads.py's)."""
    processor = DeriverProcessor(settings, store)
    return processor, processor.tick
