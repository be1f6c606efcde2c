"""The webhook delivery process (`peerlog webhooks`): one delivery loop per registered endpoint, started
when an endpoint appears and stopped when it is deleted (checked every `refresh_s`), a delivery under
way abandoned.

A process of its own rather than a worker processor: deliveries wait on other people's HTTP servers,
and a slow receiver must not hold up derivation; progress lives in Postgres, not in a consumer group.
Run one: two would each deliver every event."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading

from projections.outages import DATABASE_AWAY, while_database_away
from services.settings import Settings
from services.webhooks.delivery import Endpoint, RetryPolicy
from services.webhooks.store import WebhookStore, engine_for
from services.webhooks.targets import delivery_client
from services.webhooks.worker import run_endpoint

log = logging.getLogger(__name__)


async def supervise(
    settings: Settings,
    store: WebhookStore,
    stop: asyncio.Event,
    refresh_s: float = 5.0,
    policy: RetryPolicy = RetryPolicy(),
) -> None:
    """Keep one loop per registered endpoint until `stop` is set. Each has its own HTTP client, so its own
    connection pool: one webhook's slow receivers cannot take the connections every other one needs."""
    running: dict[str, tuple[asyncio.Event, asyncio.Task]] = {}
    halting: dict[str, asyncio.Task] = {}
    allow_private = settings.webhook.allow_private_targets
    while not stop.is_set():
        wanted = await _registered(store)
        if wanted is None:
            wanted = {endpoint_id: None for endpoint_id in running}  # unknown: keep what runs
        for endpoint_id in running.keys() - wanted.keys():
            # in the background: the other endpoints are started and stopped meanwhile
            halting[endpoint_id] = asyncio.create_task(_halt(*running.pop(endpoint_id)))
        for endpoint_id in [e for e, task in halting.items() if task.done()]:
            del halting[endpoint_id]
        for endpoint_id in wanted.keys() - running.keys() - halting.keys():  # one loop per endpoint at most
            halt = asyncio.Event()
            task = asyncio.create_task(_deliver(wanted[endpoint_id], settings, store, allow_private, halt, policy))
            running[endpoint_id] = (halt, task)
        for endpoint_id, (halt, task) in list(running.items()):
            if task.done():  # a loop that failed (the broker away at start): start it again next round
                log.error("webhook %s stopped: %r", endpoint_id, task.exception())
                del running[endpoint_id]
        try:
            await asyncio.wait_for(stop.wait(), refresh_s)
        except TimeoutError:
            pass
    await asyncio.gather(*(_halt(*loop) for loop in running.values()), *halting.values())


async def _deliver(
    endpoint: Endpoint,
    settings: Settings,
    store: WebhookStore,
    allow_private: bool,
    halt: asyncio.Event,
    policy: RetryPolicy,
) -> None:
    # every connection checked: a name registered while public may resolve to a private address later
    async with delivery_client(allow_private) as client:
        await run_endpoint(endpoint, settings.kafka, store, client, halt, policy)


async def _registered(store: WebhookStore) -> dict[str, Endpoint] | None:
    """The registered endpoints by id; None while the database is away (Postgres restarting): the loops
    running keep on, and the list is read again next round. Before, the process exited there."""
    try:
        listed = await asyncio.get_running_loop().run_in_executor(None, store.endpoints)
    except DATABASE_AWAY as err:
        log.warning("webhook endpoints unreadable, the database is unavailable (%s); reading them again soon", err)
        return None
    return {e.endpoint_id: e for e in listed}


async def _halt(halt: asyncio.Event, task: asyncio.Task) -> None:
    halt.set()
    await asyncio.gather(task, return_exceptions=True)


async def run_webhooks(settings: Settings) -> None:
    """Deliver until SIGTERM/SIGINT."""
    stop = asyncio.Event()
    stopping = threading.Event()  # the same signal, for the start's wait for Postgres in a thread
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, lambda: (stop.set(), stopping.set()))
    waiting = while_database_away(stopping, "webhooks start")
    try:  # started while Postgres is away (restarting with everything else): wait for it
        engine = await asyncio.get_running_loop().run_in_executor(None, waiting, engine_for, settings.database)
    except DATABASE_AWAY:
        if stopping.is_set():
            return
        raise
    store = WebhookStore(engine)
    try:
        await supervise(settings, store, stop)
    finally:
        store.engine.dispose()
