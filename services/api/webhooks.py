"""WebhookService: register, list and delete a workspace's webhooks; see and retry their dead letters.
The store is blocking (its own small pool): every call runs off the event loop."""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import unicodedata
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from urllib.parse import urlsplit

from services.api import validation as v
from services.api.cursors import time_id
from services.api.deps import ApiDeps
from services.api.reads import Page, page
from services.api.slots import Slots, per_workspace
from services.bus.subscription import Filter
from services.errors import InvalidArgument, NotFound, ResourceExhausted
from services.webhooks.delivery import Delivery, Endpoint, RetryPolicy, deliver
from services.webhooks.store import DeadLetter, WebhookStore
from services.webhooks.targets import PrivateTarget, check_url, delivery_client, unsendable
from services.webhooks.worker import current_body

MAX_URL_CHARS = 2000
ONCE = RetryPolicy(attempts=1)  # a retry asked for by a caller: one attempt, answered at once


def _off_loop(fn, *args):
    return asyncio.get_running_loop().run_in_executor(None, fn, *args)


def check_url_form(url: str) -> None:
    """InvalidArgument unless `url` is an http(s) URL of at most MAX_URL_CHARS with a host (an IP literal or a
    name DNS can look up), a port from 1 to 65535 if it names one, and no space or control character."""
    shown = f"url {url[:80]!r}"
    if len(url) > MAX_URL_CHARS:
        raise InvalidArgument(f"{shown} has {len(url)} characters; the limit is {MAX_URL_CHARS}")
    # a NUL cannot be stored, and urlsplit silently drops tabs and newlines: what was checked would not be
    # what is kept
    odd = next((c for c in url if c.isspace() or unicodedata.category(c) == "Cc"), None)
    if odd is not None:
        raise InvalidArgument(f"{shown} contains U+{ord(odd):04X} (a space or control character); percent-encode it")
    try:
        parts = urlsplit(url)
        port = parts.port  # parsed on access: a port that is not a number, or over 65535, raises here
    except ValueError as malformed:
        raise InvalidArgument(f"{shown} is not a well-formed URL: {malformed}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(f"{shown} is not an http(s) URL with a host")
    if port == 0:
        raise InvalidArgument(f"{shown} names port 0; name one from 1 to 65535, or none for the scheme's own")
    # parsed as deliveries parse it: a URL accepted here that httpx refuses failed every delivery
    why = unsendable(url)
    if why is not None:
        raise InvalidArgument(
            f"{shown} is not a URL deliveries can be sent to ({why}); give the host as an IP address, a name of "
            "letters, digits and hyphens (an internationalized one in its xn-- form), or a name valid in IDNA 2008"
        )
    _check_host(shown, parts.hostname)


def _check_host(shown: str, host: str) -> None:
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    try:
        host.encode("idna")  # what the resolver does with it: a name it cannot encode is no host at all
    except UnicodeError:
        raise InvalidArgument(
            f"{shown}: {host[:80]!r} is not a host name DNS can look up (an empty label, one over 63 characters, "
            "or a character host names may not hold)"
        ) from None


def check_request(workspace_id: str, url: str, types: list[str]) -> None:
    """What a new endpoint's request can be refused for without a lookup: its ids, types and URL's form."""
    v.check_id("workspace_id", workspace_id)
    Filter(workspace_id, frozenset(types))  # refuses unknown types
    check_url_form(url)


async def check_target(url: str, allow_private: bool = False) -> None:
    """Unless `allow_private`, refuse a URL (of a checked request) whose host is or resolves to a non-public
    address (services/webhooks/targets.py)."""
    if not allow_private:
        try:
            await check_url(url)
        except PrivateTarget as refused:
            raise InvalidArgument(f"url {url[:80]!r}: {refused}") from None


def _full(workspace_id: str, most: int) -> ResourceExhausted:
    return ResourceExhausted(
        f"workspace {workspace_id!r} already has {most} webhooks, the most one workspace may have "
        "(PEERLOG_WEBHOOK_MAX_PER_WORKSPACE): delete one it no longer needs, or raise the setting"
    )


async def check_room(store: WebhookStore, workspace_id: str, most: int) -> None:
    """ResourceExhausted when the workspace has `most` webhooks already: before its URL's name is looked up,
    so a workspace at its limit makes no DNS lookups (each holds a thread until its nameserver answers)."""
    if len(await listed(store, workspace_id)) >= most:
        raise _full(workspace_id, most)


async def create(
    store: WebhookStore, workspace_id: str, url: str, types: list[str], most: int
) -> tuple[Endpoint, datetime, str]:
    """The new endpoint at a checked `url` (check_request, check_target), when it was registered, and its secret (shown once).
    ResourceExhausted if the workspace already has `most` webhooks."""
    secret = f"whsec_{secrets.token_hex(32)}"
    endpoint = Endpoint(f"wh_{uuid.uuid4().hex}", workspace_id, url, secret.encode(), frozenset(types))
    if not await _off_loop(store.register, endpoint, most):  # two at once may both have passed check_room
        raise _full(workspace_id, most)
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


@dataclass(frozen=True)
class ListedDeadLetter:
    """A dead letter on a page, with its JSON as the text the reply carries (`reads.page` measures text; a
    bytes value would count as an empty field) and when it was given up on (its place in the list)."""

    letter: DeadLetter
    json: str
    dead_at: datetime


async def dead_letters(
    ctx: ApiDeps, store: WebhookStore, workspace_id: str, webhook_id: str, size: int, token: str
) -> Page:
    """A page of the webhook's dead letters, oldest first, cut short before its reply would pass
    MAX_PAGE_BYTES: each holds a whole event."""
    endpoint_id = (await _endpoint(store, workspace_id, webhook_id)).endpoint_id
    limit, scope = v.page_size(size), ("ListWebhookDeadLetters", workspace_id, endpoint_id)
    after = ctx.cursors.decode_time_id(scope, token)
    rows = await _off_loop(_current_page, store, endpoint_id, after, limit)
    listed = [ListedDeadLetter(letter, letter.body.decode(), dead_at) for letter, dead_at in rows]
    return page(ctx, scope, listed, limit, lambda d: time_id(d.dead_at, d.letter.event_id))


def _current_page(store: WebhookStore, endpoint_id: str, after, limit: int) -> list[tuple[DeadLetter, datetime]]:
    return [(_current(letter), at) for letter, at in store.dead_letter_page(endpoint_id, after, limit)]


def _current(letter: DeadLetter) -> DeadLetter:
    return replace(letter, body=current_body(letter.body))


def running_retries(most: int) -> Slots:
    """The dead-letter retries one workspace may run at once on this process."""
    return per_workspace(
        most,
        "dead-letter retries waiting on their receivers",
        "PEERLOG_WEBHOOK_RETRIES_PER_WORKSPACE",
        "retry once one has answered",
    )


async def retry(
    store: WebhookStore, workspace_id: str, webhook_id: str, event_id: str, allow_private: bool = False
) -> Delivery:
    """One attempt now; the dead letter is forgotten if it lands. Not delivered: why, in `error`."""
    v.check_id("event_id", event_id)  # it goes into SQL: a NUL there is the driver's error, not the caller's
    endpoint = await _endpoint(store, workspace_id, webhook_id)
    letter = await _off_loop(store.dead_letter, endpoint.endpoint_id, event_id)
    if letter is None:
        raise NotFound(f"webhook {webhook_id!r} has no dead letter of event {event_id!r}")
    body = await _off_loop(current_body, letter.body)
    async with delivery_client(allow_private) as client:
        outcome = await deliver(client, endpoint, letter.event_id, letter.event_type, body, ONCE)
    if outcome.delivered:
        await _off_loop(store.forget, endpoint.endpoint_id, event_id)
    return outcome
