"""One webhook delivery: a signed POST of one event, retried with exponential backoff, and after the
last failed attempt a dead letter (the caller records it) instead of an error."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from tenacity import AsyncRetrying, RetryError, retry_if_exception_type, stop_after_attempt, wait_exponential

from services.webhooks.signing import SIGNATURE_HEADER, signature
from services.webhooks.targets import PrivateTarget


@dataclass(frozen=True)
class Endpoint:
    """A registered URL of a workspace, its signing secret and the event types it takes (empty: all)."""

    endpoint_id: str
    workspace_id: str
    url: str
    secret: bytes
    types: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 8  # then dead-lettered
    first_wait_s: float = 1.0
    max_wait_s: float = 300.0
    timeout_s: float = 10.0  # per attempt


@dataclass(frozen=True)
class Delivery:
    """Delivered, or dead-lettered with the last attempt's error."""

    delivered: bool
    attempts: int
    error: str = ""


class Refused(Exception):
    """The receiver answered, but not with 2xx."""


async def deliver(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    event_id: str,
    event_type: str,
    body: bytes,
    policy: RetryPolicy = RetryPolicy(),
    clock: Callable[[], float] = time.time,
) -> Delivery:
    """POST `body` (one event's JSON) to the endpoint until a 2xx or `policy.attempts` failures. Each
    attempt is signed anew (its own timestamp); Peerlog-Event-Id lets the receiver drop repeats. Never
    raises (but for cancellation): an error that is not the network's or the receiver's is not retried."""
    attempts = 0

    async def attempt() -> None:
        nonlocal attempts
        attempts += 1
        headers = {
            "Content-Type": "application/json",
            "Peerlog-Event-Id": event_id,
            "Peerlog-Event-Type": event_type,
            SIGNATURE_HEADER: signature(endpoint.secret, int(clock()), body),
        }
        # the whole attempt in the time (httpx's timeout bounds each read, so an answer dripped a byte at a
        # time never ended), and the answer judged by its status alone: its body is never read (one of
        # gigabytes, read whole, took the webhook process, or the API's on a retry, out of memory)
        try:
            async with asyncio.timeout(policy.timeout_s):
                async with client.stream("POST", endpoint.url, content=body, headers=headers) as response:
                    status = response.status_code
        except TimeoutError:
            raise Refused(f"no answer within {policy.timeout_s:g} s") from None
        if not 200 <= status < 300:
            raise Refused(f"HTTP {status}")

    retrying = AsyncRetrying(
        stop=stop_after_attempt(policy.attempts),
        wait=wait_exponential(multiplier=policy.first_wait_s, max=policy.max_wait_s),
        retry=retry_if_exception_type((Refused, httpx.TransportError)),
    )
    try:
        await retrying(attempt)
    except PrivateTarget as refused:  # the address is refused every time: no retry
        return Delivery(False, attempts, f"refused: {refused}")
    except RetryError as failed:
        return Delivery(False, attempts, _described(failed.last_attempt.exception()))
    except Exception as unusable:  # e.g. a URL httpx cannot send to: it fails every time, so no retry
        # raised, it stopped the endpoint's loop, which restarted on the same event forever
        return Delivery(False, attempts, f"undeliverable: {_described(unusable)}")
    return Delivery(True, attempts)


def _described(error: BaseException | None) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
