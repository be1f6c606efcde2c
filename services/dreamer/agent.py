"""The dreamer's shell: a DreamRequested in, the dream's edits and its outcome out, in one transaction.

DreamStarted goes out at once on a side producer (so ListDreams shows a dream in progress); everything
the specialists write, and DreamCompleted or DreamFailed, commit atomically with the request's offset.
A worker killed mid-dream therefore leaves nothing behind, and the next owner dreams again from the start.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from services.bus.producer import Emitter
from services.bus.runner import Get, Step
from services.bus.takeover import TransactionFailed
from services.bus.topics import DREAMS
from services.dreamer.edits import Dream
from services.dreamer.ports import DreamReads
from services.dreamer.specialist import DreamRun
from services.events import (
    ORIGINAL,
    DreamCompleted,
    DreamFailed,
    DreamRequested,
    DreamStarted,
    Event,
    ProducerInfo,
)
from services.events.stamps import written_now
from services.llm.client import ModelClient
from services.llm.embeddings import make_embedder
from services.llm.errors import EmbeddingError, ModelError, shown

if TYPE_CHECKING:
    from services.settings import Settings

log = logging.getLogger(__name__)
PRODUCER = ProducerInfo(component="dreamer", version="0.1.0")
SPECIALISTS = ("deduction", "induction")


class Dreamer:
    name = "dreamer"
    inputs = (DREAMS,)
    max_batch = 4  # dreams of different pairs run concurrently; each is many model calls

    def __init__(self, settings: Settings, reads: DreamReads) -> None:
        self.settings = settings.dream
        self.event_budget_s = self.settings.max_dream_s  # the runner sizes its poll interval to it
        self.reads = reads
        self.embedder = make_embedder(settings.embedding)
        self.models = {s: ModelClient(s, settings.llm.stage(s)) for s in SPECIALISTS}
        self.emitter = Emitter(settings.kafka, "peerlog-dreamer")

    async def handle(self, get: Get, event: Event) -> Step:
        if not isinstance(event, DreamRequested):
            return Step()
        pair = dict(workspace_id=event.workspace_id, observer_id=event.observer_id, observed_id=event.observed_id)
        await self.emitter.emit(
            [DreamStarted(**pair, dream_id=event.dream_id, producer=PRODUCER, causation_id=event.event_id)]
        )
        try:
            return await self._dream(event, pair)
        except self.reads.unavailable as error:
            # the log's fault's kin: nothing of the dream is written, and it is dreamt again from the committed
            # offsets. Raised as it was, it ended the worker and every processor in it (a Postgres restart)
            raise TransactionFailed(f"dream {event.dream_id}: the projections went out of reach: {error}") from error

    async def _dream(self, event: DreamRequested, pair: dict) -> Step:
        derivation = await self.reads.current_derivation(**pair)  # read before any model call, never across one
        run = DreamRun(
            Dream(
                **pair,
                dream_id=event.dream_id,
                producer=PRODUCER,
                causation_id=event.dream_id,
                derivation=derivation,
                peer_card=event.peer_card,
            ),
            self.reads,
            self.embedder,
        )
        rounds = {"deduction": self.settings.deduction_rounds, "induction": self.settings.induction_rounds}
        failure = None
        try:
            # bounded: a dream outliving the worker's poll interval would be evicted and dreamt again
            async with asyncio.timeout(self.settings.max_dream_s):
                for specialist in SPECIALISTS:
                    await run.specialist(
                        specialist, self.models[specialist], rounds[specialist], self.settings.max_calls_per_round
                    )
        except (ModelError, EmbeddingError, TimeoutError) as error:
            # what the specialists wrote before a model failed (or time ran out) stands; the scheduler
            # retries after its cooldown. An embedding model answering wrongly fails the dream the same way
            failure = (
                shown(error)
                if not isinstance(error, TimeoutError)
                else (
                    f"the dream ran out of its time budget of {self.settings.max_dream_s:g} s (PEERLOG_DREAM_MAX_DREAM_S)"
                )
            )
            log.warning("dream %s failed: %s", event.dream_id, failure if isinstance(error, TimeoutError) else error)
        # a failed dream's edits are written too, so this holds for it as well: after a promotion they would
        # land in a derivation reads no longer follow
        now = await self.reads.current_derivation(**pair)
        if now != derivation:
            return Step([self._promoted_meanwhile(event, pair, derivation, now)])
        await run.card_kept()
        ended = dict(**pair, dream_id=event.dream_id, edits=run.edits, producer=PRODUCER, causation_id=event.event_id)
        end = DreamCompleted(**ended) if failure is None else DreamFailed(**ended, reason=failure[:2000])
        return Step(written_now([*run.events, end]))  # the end too: a dream ends no sooner than its edits

    @staticmethod
    def _promoted_meanwhile(event: DreamRequested, pair: dict, was: str, now: str) -> DreamFailed:
        """A promotion landed while the dream ran: its edits were for a derivation reads no longer follow, so
        none is written (they would be invisible) and it fails, to be dreamt again on the current one."""
        reason = (
            f"the pair was promoted to derivation {now or ORIGINAL!r} while the dream ran on {was or ORIGINAL!r}; "
            "its edits were not written, and the scheduler dreams again"
        )
        log.warning("dream %s failed: %s", event.dream_id, reason)
        return DreamFailed(
            **pair, dream_id=event.dream_id, reason=reason, producer=PRODUCER, causation_id=event.event_id
        )


def build(settings: Settings, reads: DreamReads):
    """The dreamer, reading the projections through `reads` (the worker passes projections' implementation)."""
    return Dreamer(settings, reads), None
