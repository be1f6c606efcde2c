"""The dream scheduler's shell: observation, perception and dream events in, dream requests out.

Each pair's schedule is state in the runner's changelog, so an idle wait survives a restart; a clock
re-checks waiting pairs by sending DreamCheckDue ticks that are then decided in-stream, like any event.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from services.bus.producer import Emitter
from services.bus.runner import Get, State, Step
from services.bus.topics import DREAMS, OBSERVATIONS, PERCEIVED
from services.dreamer.schedule import Defaults, PairSchedule, decide, ready
from services.events import DreamCheckDue, Event, ProducerInfo
from services.events.perception import pair_of

if TYPE_CHECKING:
    from services.settings import Settings

PRODUCER = ProducerInfo(component="dream-scheduler", version="0.1.0")
CLOCK = ProducerInfo(component="dream-clock", version="0.1.0")


class DreamScheduler:
    name = "dream-scheduler"
    inputs = (OBSERVATIONS, PERCEIVED, DREAMS)
    max_batch = 500

    def __init__(self, settings: Settings) -> None:
        self.settings = settings.dream
        self.defaults = Defaults(dreams=settings.reasoning.dreams, peer_card=settings.reasoning.peer_card)
        self.tick_s = settings.dream.tick_s
        self.emitter = Emitter(settings.kafka, "peerlog-dream-clock")

    async def handle(self, get: Get, event: Event) -> Step:
        raw = get(event.key)
        state, events = decide(
            PairSchedule.model_validate(raw) if raw else PairSchedule(), event, self.settings, PRODUCER, self.defaults
        )
        return Step(events, {event.key: state.model_dump(mode="json")})

    async def tick(self, states: Mapping[str, State]) -> None:
        now = datetime.now(UTC)
        ticks = [
            DreamCheckDue(**pair_of(k), producer=CLOCK)
            for k, raw in states.items()
            if raw and ready(PairSchedule.model_validate(raw), now, self.settings, self.defaults)
        ]
        if ticks:
            await self.emitter.emit(ticks)


def build(settings: Settings):
    scheduler = DreamScheduler(settings)
    return scheduler, scheduler.tick
