"""Re-derivation: run the deriver again over recorded perceptions into a separate, named derivation.

The perceived topic is the record of what each pair saw; replaying it through the deriver with another
model or prompt yields a second store for the same pairs, stamped `derivation=<name>` on every event.
Reads default to the current derivation (""), so nothing existing changes; a named one is read by name
(ListObservations.derivation, `peerlog derivations compare`). Each batch is one log transaction.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import create_async_engine

from services.bus.consistency import ConsistencyToken
from services.bus.producer import EventLog
from services.bus.streams import read, to_the_end
from services.bus.topics import PERCEIVED
from services.deriver.batching import Batching, add, next_window
from services.deriver.derive import Deriver
from services.deriver.judge import Known, Pair
from services.deriver.store import ObservationStore
from services.events import Event, MessagePerceived
from services.llm.client import ModelClient
from services.llm.embeddings import make_embedder
from services.llm.settings import ModelStageSettings
from services.llm.tokens import count_tokens

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class Scope:
    workspace_id: str
    observer_id: str = ""  # both or neither: one pair, or the whole workspace
    observed_id: str = ""

    def covers(self, e: MessagePerceived) -> bool:
        return e.workspace_id == self.workspace_id and (
            not self.observer_id or (e.observer_id, e.observed_id) == (self.observer_id, self.observed_id))


@dataclass(frozen=True)
class Report:
    name: str
    pairs: int
    messages: int
    batches: int
    events: int
    consistency_token: str  # pass to a read to see the whole derivation


def labelled(event: Event, name: str) -> Event:
    """The event as part of derivation `name`: its batch id is the name's own, so batch rows never collide."""
    update = {"derivation": name}
    if getattr(event, "batch_id", None):
        update["batch_id"] = hashlib.sha256(f"{name}/{event.batch_id}".encode()).hexdigest()[:24]
    return event.model_copy(update=update)


def perceived(settings, scope: Scope) -> dict[str, list[MessagePerceived]]:
    """Every committed perception in scope, by pair key in log order (up to the end as of now)."""
    by_pair: dict[str, list[MessagePerceived]] = {}
    for msg in to_the_end(settings.kafka, PERCEIVED.full_name(settings.kafka.topic_prefix), timeout=3600):
        event = read(msg.value())
        if isinstance(event, MessagePerceived) and scope.covers(event):
            by_pair.setdefault(event.key, []).append(event)
    return by_pair


async def rederive(settings, name: str, scope: Scope, model: str = "",
                   progress: Callable[[str], None] = print) -> Report:
    """Derive every perception in scope again into derivation `name`, with `model` (default: the deriver's)."""
    if not NAME.match(name):
        raise ValueError(f"derivation name {name!r} must match {NAME.pattern}")
    stage = settings.llm.stage("deriver")
    stage = ModelStageSettings(**{**stage.model_dump(), **({"model": model} if model else {})})
    log = EventLog(settings.kafka, client_id=f"peerlog-rederive-{name}")
    log.start()
    engine = create_async_engine(settings.database.url, pool_size=2)
    store = ObservationStore(engine, settings.database.schema_name, derivation=name)

    async def emit(events):  # progress markers, labelled like everything else
        await log.append([labelled(e, name) for e in events])
    deriver = Deriver(settings.deriver, ModelClient("deriver", stage), make_embedder(settings.embedding), store, emit)
    batches = messages = events = 0
    written = ConsistencyToken.of([])
    try:
        by_pair = perceived(settings, scope)
        for key, seen in by_pair.items():
            pair, state = Pair(*key.split("/", 2)), Batching()
            recent: list[Known] = []
            for e in seen:
                state = add(state, e, count_tokens(e.content))
            while state.pending:
                window, state = next_window(state, settings.deriver.window_tokens)
                outcome = await deriver.derive(pair, window, recent, f"rederive:{name}")
                recent = outcome.recent
                written = written.merge(await log.append([labelled(e, name) for e in outcome.events]))
                batches, messages, events = batches + 1, messages + len(window), events + len(outcome.events)
            progress(f"{key}: {len(seen)} messages re-derived into {name!r}")
        return Report(name, len(by_pair), messages, batches, events, written.encode())
    finally:
        log.close()
        await engine.dispose()
