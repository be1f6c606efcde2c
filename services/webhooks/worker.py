"""The delivery loop of one endpoint: its workspace's events from its stored progress, each delivered
(or dead-lettered) before the progress moves past it, in log order per key."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
import orjson

from services.bus.settings import KafkaSettings
from services.bus.subscription import Delivered, Filter, LogSubscription
from services.errors import FailedPrecondition, InvalidArgument
from services.events import EventDecodeError, decode
from services.webhooks.delivery import Endpoint, RetryPolicy, deliver
from services.webhooks.store import DeadLetter, WebhookStore

POLL_S = 0.5
T = TypeVar("T")


def body_of(delivered: Delivered) -> bytes:
    """What is POSTed: the event's JSON object, as Subscribe sends it."""
    return orjson.dumps(delivered.event.model_dump(mode="json"))


def current_body(kept: bytes) -> bytes:
    """A dead letter's body at this code's schema version, as live deliveries and Subscribe send it: a letter
    kept across an upgrade holds the version it died at. One this code cannot read is sent as it was kept."""
    try:
        return orjson.dumps(decode(kept).model_dump(mode="json"))
    except EventDecodeError:
        return kept


async def run_endpoint(
    endpoint: Endpoint,
    kafka: KafkaSettings,
    store: WebhookStore,
    client: httpx.AsyncClient,
    stop: asyncio.Event,
    policy: RetryPolicy = RetryPolicy(),
) -> None:
    """Deliver until `stop` is set, which also abandons a delivery under way (a deleted endpoint gets no
    more POSTs, a stopping process does not wait out a receiver's retries); a restart resumes after the
    last event finished with. Raises FailedPrecondition, its progress untouched, if the log does not hold
    that progress."""
    thread = ThreadPoolExecutor(1, thread_name_prefix=f"webhook-{endpoint.endpoint_id}")
    run = asyncio.get_running_loop().run_in_executor
    cursor = await run(thread, store.cursor, endpoint.endpoint_id)
    subscription = LogSubscription(kafka, Filter(endpoint.workspace_id, endpoint.types), cursor)
    try:
        await run(thread, subscription.start)
        while not stop.is_set():
            for delivered in await run(thread, subscription.poll, POLL_S):
                # checked before each event: a batch holds up to 500, each retried for minutes
                if stop.is_set() or not await _one(endpoint, store, client, policy, delivered, thread, stop):
                    break
    except (InvalidArgument, FailedPrecondition) as exc:  # start's and poll's "the log does not hold the cursor"
        raise progress_off_the_log(endpoint, exc) from exc
    finally:
        await run(thread, subscription.close)
        thread.shutdown(wait=False)


def progress_off_the_log(endpoint: Endpoint, why: Exception) -> FailedPrecondition:
    """Why an endpoint's loop stopped instead of skipping: no one is there to reconnect with a better cursor,
    so the operator is told, every round the supervisor starts it again, until the log holds its progress
    again (restored) or the progress is reset by hand."""
    return FailedPrecondition(
        f"webhook {endpoint.endpoint_id} holds its deliveries: its progress is not on the log ({why}). Nothing "
        "is skipped: it resumes by itself once the log is restored, or delete its rows in webhook_progress "
        "(schema <projection schema>_webhooks) to deliver again from the log's start"
    )


async def _one(endpoint, store, client, policy, delivered: Delivered, thread, stop: asyncio.Event) -> bool:
    """Deliver one event and record it done with; False if `stop` came first (nothing recorded)."""
    event, body = delivered.event, body_of(delivered)
    outcome = await until_stopped(deliver(client, endpoint, event.event_id, event.type, body, policy), stop)
    if outcome is None:
        return False
    dead = (
        None
        if outcome.delivered
        else DeadLetter(endpoint.endpoint_id, event.event_id, event.type, body, outcome.attempts, outcome.error)
    )
    await asyncio.get_running_loop().run_in_executor(
        thread, store.advance, endpoint.endpoint_id, delivered.cursor, dead
    )
    return True


async def until_stopped(work: Coroutine[Any, Any, T], stop: asyncio.Event) -> T | None:
    """`work`'s result, or None once `stop` is set, `work` then cancelled."""
    task, stopped = asyncio.ensure_future(work), asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # cancelled ourselves (the process stopping): neither is left behind
        stopped.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return task.result() if not task.cancelled() else None


async def retry_dead_letter(
    endpoint: Endpoint,
    store: WebhookStore,
    client: httpx.AsyncClient,
    event_id: str,
    policy: RetryPolicy = RetryPolicy(),
) -> bool:
    """Deliver a dead letter again; forgotten once delivered. Whether it was."""
    letter = store.dead_letter(endpoint.endpoint_id, event_id)
    if letter is None:
        return False
    outcome = await deliver(client, endpoint, letter.event_id, letter.event_type, letter.body, policy)
    if outcome.delivered:
        store.forget(endpoint.endpoint_id, event_id)
    return outcome.delivered
