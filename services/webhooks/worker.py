"""The delivery loop of one endpoint: its workspace's events from its stored progress, each delivered
(or dead-lettered) before the progress moves past it, in log order per key."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson

from services.bus.settings import KafkaSettings
from services.bus.subscription import Delivered, Filter, LogSubscription
from services.webhooks.delivery import Endpoint, RetryPolicy, deliver
from services.webhooks.store import DeadLetter, WebhookStore

POLL_S = 0.5


def body_of(delivered: Delivered) -> bytes:
    """What is POSTed: the event's JSON object, as Subscribe sends it."""
    return orjson.dumps(delivered.event.model_dump(mode="json"))


async def run_endpoint(
    endpoint: Endpoint,
    kafka: KafkaSettings,
    store: WebhookStore,
    client: httpx.AsyncClient,
    stop: asyncio.Event,
    policy: RetryPolicy = RetryPolicy(),
) -> None:
    """Deliver until `stop` is set; a restart resumes after the last event finished with."""
    thread = ThreadPoolExecutor(1, thread_name_prefix=f"webhook-{endpoint.endpoint_id}")
    run = asyncio.get_running_loop().run_in_executor
    cursor = await run(thread, store.cursor, endpoint.endpoint_id)
    subscription = LogSubscription(kafka, Filter(endpoint.workspace_id, endpoint.types), cursor)
    try:
        await run(thread, subscription.start)
        while not stop.is_set():
            for delivered in await run(thread, subscription.poll, POLL_S):
                await _one(endpoint, store, client, policy, delivered, thread)
    finally:
        await run(thread, subscription.close)
        thread.shutdown(wait=False)


async def _one(endpoint, store, client, policy, delivered: Delivered, thread) -> None:
    event, body = delivered.event, body_of(delivered)
    outcome = await deliver(client, endpoint, event.event_id, event.type, body, policy)
    dead = (
        None
        if outcome.delivered
        else DeadLetter(endpoint.endpoint_id, event.event_id, event.type, body, outcome.attempts, outcome.error)
    )
    await asyncio.get_running_loop().run_in_executor(
        thread, store.advance, endpoint.endpoint_id, delivered.cursor, dead
    )


async def retry_dead_letter(
    endpoint: Endpoint,
    store: WebhookStore,
    client: httpx.AsyncClient,
    event_id: str,
    policy: RetryPolicy = RetryPolicy(),
) -> bool:
    """Deliver a dead letter again; forgotten once delivered. Whether it was."""
    letter = next((d for d in store.dead_letters(endpoint.endpoint_id) if d.event_id == event_id), None)
    if letter is None:
        return False
    outcome = await deliver(client, endpoint, letter.event_id, letter.event_type, letter.body, policy)
    if outcome.delivered:
        store.forget(endpoint.endpoint_id, event_id)
    return outcome.delivered
