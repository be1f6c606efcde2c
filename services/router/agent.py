"""The router's Faust shell: session events in, MessagePerceived out, session state in a table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.bus.streams import Wiring, read
from services.bus.topics import PERCEIVED, SESSIONS
from services.events import ProducerInfo, encode
from services.router.policy import SessionState, decide, evolve

if TYPE_CHECKING:
    from services.settings import Settings

PRODUCER = ProducerInfo(component="router", version="0.1.0")


def register(w: Wiring, settings: Settings) -> None:
    sessions, perceived = w.topic(SESSIONS), w.topic(PERCEIVED)
    states = w.table("router-sessions")

    @w.app.agent(sessions, name="router")
    async def route(stream):
        async for record in stream.events():
            event = read(record.value)
            if event is None:
                continue
            raw = states.get(event.key)
            state = SessionState.model_validate(raw) if raw else SessionState()
            for out in decide(state, event, PRODUCER):
                await perceived.send(key=out.key.encode(), value=encode(out))
            states[event.key] = evolve(state, event).model_dump(mode="json")
