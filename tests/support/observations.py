"""Derived observations written straight to the log, as the dreamer writes them."""

from __future__ import annotations

from collections.abc import Sequence

from services.bus.producer import EventLog
from services.events import Event, Level, ObservationAdded, ObservationReinforced, ProducerInfo, Source
from services.settings import Settings

TEST_DREAMER = ProducerInfo(component="test-dreamer", version="0")


def derived(
    obs_id: str,
    level: Level,
    content: str,
    premises: list[str],
    *,
    producer: ProducerInfo = TEST_DREAMER,
    observer: str = "alice",
    **kw,
) -> ObservationAdded:
    """A derived observation of `observer` about bob in workspace w, citing `premises`."""
    return ObservationAdded(
        workspace_id="w",
        observer_id=observer,
        observed_id="bob",
        observation_id=obs_id,
        level=level,
        content=content,
        premise_ids=tuple(premises),
        producer=producer,
        **kw,
    )


TEST_DERIVER = ProducerInfo(component="deriver", version="0", model="m", prompt_version="p")


def reinforcements(observation_id: str, message_ids: Sequence[str], span: str) -> list[ObservationReinforced]:
    """The deriver finding alice's fact about bob again in each of `message_ids`: one more source each time."""
    return [
        ObservationReinforced(
            workspace_id="w",
            observer_id="alice",
            observed_id="bob",
            observation_id=observation_id,
            sources=(Source(message_id=i, span=span),),
            batch_id=f"b{n}",
            producer=TEST_DERIVER,
        )
        for n, i in enumerate(message_ids)
    ]


def append(settings: Settings, events: Sequence[Event]) -> str:
    """Append `events` to the log in one transaction; return the consistency token of the write."""
    log = EventLog(settings.kafka)
    log.start()
    try:
        return log.append_sync(events).encode()
    finally:
        log.close()
