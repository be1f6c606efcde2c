"""Build the Faust app: one consumer group hosting the chosen processors, exactly-once."""

from __future__ import annotations

import importlib

import faust

from services.bus.streams import Wiring
from services.settings import Settings

PROCESSORS = {
    "router": "services.router.agent",
    "deriver": "services.deriver.agent",
    "summarizer": "services.summarizer.agent",
}


def build_app(settings: Settings) -> faust.App:
    """The Faust app with every processor in settings.worker.processors registered on it."""
    w = settings.worker
    app = faust.App(
        w.app_id,
        broker=f"kafka://{settings.kafka.bootstrap_servers}",
        store="memory://",  # tables recover from their changelog topics, the durable copy
        processing_guarantee="exactly_once",
        topic_partitions=settings.kafka.partitions,
        topic_replication_factor=settings.kafka.replication_factor,
        broker_commit_interval=w.commit_interval_s,
        consumer_auto_offset_reset="earliest",
        web_enabled=False,
        datadir=w.data_dir,
    )
    wiring = Wiring(app, settings.kafka)
    for name in w.processor_names():
        if name not in PROCESSORS:
            raise ValueError(f"unknown processor {name!r}; choose from {', '.join(PROCESSORS)}")
        importlib.import_module(PROCESSORS[name]).register(wiring, settings)
    return app
