"""The deriver's Faust shell: perceived messages in, observations out, per-pair state in tables."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import create_async_engine

from services.bus.producer import Emitter
from services.bus.streams import Wiring, read
from services.bus.topics import DEADLETTER, OBSERVATIONS, PERCEIVED
from services.deriver.batching import add, due, next_window
from services.deriver.derive import Deriver
from services.deriver.judge import Pair
from services.deriver.state import dump_recent, load_batching, load_recent
from services.deriver.store import ObservationStore
from services.events import DerivationDue, MessagePerceived, ProducerInfo
from services.llm.client import ModelClient
from services.llm.embeddings import make_embedder
from services.llm.tokens import count_tokens

if TYPE_CHECKING:
    from services.settings import Settings

log = logging.getLogger(__name__)
CLOCK = ProducerInfo(component="deriver-clock", version="0.1.0")


def build_deriver(settings: Settings) -> Deriver:
    emitter = Emitter(settings.kafka, "peerlog-deriver")
    store = ObservationStore(create_async_engine(settings.database.url, pool_size=2),
                             settings.database.schema_name)
    return Deriver(settings.deriver, ModelClient("deriver", settings.llm.stage("deriver")),
                   make_embedder(settings.embedding), store, emitter.emit)


def register(w: Wiring, settings: Settings) -> None:
    perceived = w.topic(PERCEIVED)
    send = w.sender(OBSERVATIONS, DEADLETTER)
    pending, recent = w.table("deriver-pending"), w.table("deriver-recent")
    deriver = build_deriver(settings)
    ticks = Emitter(settings.kafka, "peerlog-deriver-clock")

    @w.app.agent(perceived, name="deriver")
    async def derive(stream):
        async for record in stream.events():
            event = read(record.value)
            if not isinstance(event, MessagePerceived | DerivationDue):
                continue
            batching = load_batching(pending.get(event.key))
            if isinstance(event, MessagePerceived):
                batching = add(batching, event, count_tokens(event.content))
            while due(batching, settings.deriver, datetime.now(UTC)):
                window, batching = next_window(batching, settings.deriver.window_tokens)
                pair = Pair(event.workspace_id, event.observer_id, event.observed_id)
                outcome = await deriver.derive(pair, window, load_recent(recent.get(event.key)), event.event_id)
                for out in outcome.events:
                    await send(out)
                recent[event.key] = dump_recent(outcome.recent, settings.deriver.recent_cache, outcome.superseded)
            pending[event.key] = batching.model_dump(mode="json")

    @w.app.timer(interval=settings.deriver.tick_s)
    async def tick():
        # the age limit must fire for a quiet pair too: a tick is an event, derived in-stream
        now = datetime.now(UTC)
        for key, raw in list(pending.items()):
            if raw and due(load_batching(raw), settings.deriver, now):
                workspace, observer, observed = key.split("/", 2)
                await ticks.emit([DerivationDue(workspace_id=workspace, observer_id=observer,
                                                observed_id=observed, producer=CLOCK)])
