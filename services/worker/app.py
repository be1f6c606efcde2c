"""The worker: runs the chosen processors, each an exactly-once member of its own consumer group."""

from __future__ import annotations

import asyncio
import importlib
import logging
import signal

from prometheus_client import start_http_server

from projections.db import async_engine
from projections.deriver_reads import ObservationStore
from projections.tool_reads import SqlDreamReads
from services import tracing
from services.bus.runner import Runner
from services.settings import Settings
from services.worker.settings import PROCESSORS
from services.worker.stalled_loop import report_stalls

log = logging.getLogger(__name__)


def build_runners(settings: Settings) -> list[Runner]:
    """One runner per processor named in settings.worker.processors (WorkerSettings knows every name)."""
    w = settings.worker
    runners = []
    for name in w.processor_names():
        # members share one processor (model client, embedder, pool); each runner keeps its own state
        processor, tick = _build(name, settings)
        for number in range(1, 1 + (w.deriver_instances if name == "deriver" else 1)):
            runners.append(
                Runner(
                    settings.kafka,
                    w.app_id_for(settings.kafka.topic_prefix),
                    processor,
                    tick=tick,
                    tick_s=getattr(processor, "tick_s", 30.0),
                    member=w.member(number),
                )
            )
    return runners


def _build(name: str, settings: Settings):
    """A processor and its clock; the deriver and the dreamer are handed their reads of the projections here."""
    build = importlib.import_module(PROCESSORS[name]).build
    if name == "deriver":
        return build(settings, ObservationStore.connect(settings, pool_size=8))
    if name == "dreamer":
        return build(settings, SqlDreamReads(async_engine(settings.database)))
    return build(settings)


async def run_worker(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT; a processor that fails takes the worker down (nothing half-done survives)."""
    tracing.setup(settings.tracing, "peerlog-worker")
    runners = build_runners(settings)
    if settings.worker.metrics_port:
        start_http_server(settings.worker.metrics_port, addr=settings.worker.metrics_host)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: [r.stop() for r in runners])
    log.info("worker running %s", ", ".join(r.processor.name for r in runners))
    tasks = [asyncio.create_task(r.run(), name=r.group) for r in runners]
    watchdog = asyncio.create_task(report_stalls(settings.worker.stall_report_s), name="stall-report")
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    watchdog.cancel()
    for r in runners:
        r.stop()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        task.result()  # re-raise a processor's failure
