"""WebhookService: register, list and delete a workspace's webhooks; see and retry their dead letters.
The store is blocking (its own small pool): every call runs off the event loop."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from datetime import datetime
from urllib.parse import urlsplit

from services.api import validation as v
from services.bus.subscription import Filter
from services.errors import InvalidArgument, NotFound
from services.webhooks.delivery import Delivery, Endpoint, RetryPolicy, deliver
from services.webhooks.store import DeadLetter, WebhookStore
from services.webhooks.targets import PrivateTarget, check_url, delivery_client

MAX_URL_CHARS = 2000
ONCE = RetryPolicy(attempts=1)  # a retry asked for by a caller: one attempt, answered at once


def _off_loop(fn, *args):
    return asyncio.get_running_loop().run_in_executor(None, fn, *args)


async def _check_url(url: str, allow_private: bool) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > MAX_URL_CHARS:
        raise InvalidArgument(f"url {url[:80]!r} is not an http(s) URL with a host of at most {MAX_URL_CHARS} chars")
    if not allow_private:
        try:
            await check_url(url)
        except PrivateTarget as refused:
            raise InvalidArgument(f"url {url[:80]!r}: {refused}") from None
    return url


async def create(
    store: WebhookStore, workspace_id: str, url: str, types: list[str], allow_private: bool = False
) -> tuple[Endpoint, datetime, str]:
    """The new endpoint, when it was registered, and its secret (shown once). Unless `allow_private`, a URL
    whose host is or resolves to a non-public address is refused (services/webhooks/targets.py)."""
    v.check_id("workspace_id", workspace_id)
    Filter(workspace_id, frozenset(types))  # refuses unknown types
    secret = f"whsec_{secrets.token_hex(32)}"
    url = await _check_url(url, allow_private)
    endpoint = Endpoint(f"wh_{uuid.uuid4().hex}", workspace_id, url, secret.encode(), frozenset(types))
    await _off_loop(store.register, endpoint)
    ((_, created_at),) = [e for e in await listed(store, workspace_id) if e[0].endpoint_id == endpoint.endpoint_id]
    return endpoint, created_at, secret


async def listed(store: WebhookStore, workspace_id: str) -> list[tuple[Endpoint, datetime]]:
    v.check_id("workspace_id", workspace_id)
    return await _off_loop(store.registered, workspace_id)


async def _endpoint(store: WebhookStore, workspace_id: str, webhook_id: str) -> Endpoint:
    for endpoint, _ in await listed(store, workspace_id):
        if endpoint.endpoint_id == webhook_id:
            return endpoint
    raise NotFound(f"workspace {workspace_id!r} has no webhook {webhook_id!r}")


async def delete(store: WebhookStore, workspace_id: str, webhook_id: str) -> None:
    await _off_loop(store.delete, (await _endpoint(store, workspace_id, webhook_id)).endpoint_id)


async def dead_letters(store: WebhookStore, workspace_id: str, webhook_id: str) -> list[DeadLetter]:
    return await _off_loop(store.dead_letters, (await _endpoint(store, workspace_id, webhook_id)).endpoint_id)


async def retry(
    store: WebhookStore, workspace_id: str, webhook_id: str, event_id: str, allow_private: bool = False
) -> Delivery:
    endpoint = await _endpoint(store, workspace_id, webhook_id)
    letter = next((d for d in await _off_loop(store.dead_letters, webhook_id) if d.event_id == event_id), None)
    if letter is None:
        raise NotFound(f"webhook {webhook_id!r} has no dead letter of event {event_id!r}")
    async with delivery_client(allow_private) as client:
        outcome = await deliver(client, endpoint, letter.event_id, letter.event_type, letter.body, ONCE)
    if outcome.delivered:
        await _off_loop(store.forget, webhook_id, event_id)
    return outcome
