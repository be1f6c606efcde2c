"""The router's shell: session events in, MessagePerceived out, each session's state in its changelog."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.bus.runner import Get, Step
from services.bus.topics import SESSIONS
from services.events import Event, ProducerInfo
from services.router.policy import decide, evolve, load_state

if TYPE_CHECKING:
    from services.settings import Settings

PRODUCER = ProducerInfo(component="router", version="0.1.0")


class Router:
    name = "router"
    inputs = (SESSIONS,)
    max_batch = 500

    def __init__(self, settings: Settings) -> None:
        self.global_ = settings.configuration()

    async def handle(self, get: Get, event: Event) -> Step:
        raw = get(event.key)
        state = load_state(raw)
        return Step(
            decide(state, event, PRODUCER, self.global_),
            {event.key: evolve(state, event, self.global_).model_dump(mode="json")},
        )


def build(settings: Settings):
    return Router(settings), None
