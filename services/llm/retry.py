"""The one retry policy for model servers: transient errors are retried with backoff, others are not.

Both the chat client and the embedding client call servers through `call_async` / `call_sync`, which
turn the SDK's errors into ModelUnavailable (after the retries), ModelRequestRejected (at once) or, for a
reply the SDK could not read, ModelOutputInvalid (at once).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import openai
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from services.llm.errors import ModelError, ModelOutputInvalid, ModelRequestRejected, ModelUnavailable

T = TypeVar("T")

# 408 is the server's own timeout, so it is retried like a client-side one
_TRANSIENT_STATUS = frozenset({408, 429})
# every SDK error, and the JSONDecodeError the SDK lets out for a 200 whose body is not JSON
SERVER_ERRORS = (openai.APIError, json.JSONDecodeError)
_RAW_CHARS = 2000  # of an unreadable body kept on the error
# a server's Retry-After is waited out up to this, past max_backoff_s: cut to 8 s, a rate limit asking for
# 30 s saw every retry refused again and the work given up (a deriver batch dead-lettered) after 24 s
RETRY_AFTER_MOST_S = 60.0


class RetrySettings(Protocol):
    max_retries: int
    backoff_s: float
    max_backoff_s: float


def is_transient(error: BaseException) -> bool:
    """Timeouts, connection errors, 408, 429 and 5xx: worth another try."""
    if isinstance(error, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code in _TRANSIENT_STATUS or error.status_code >= 500
    return False


def as_model_error(stage: str, attempts: int, error: Exception) -> ModelError:
    """The domain error for an SDK error (one of SERVER_ERRORS) that ended a call."""
    if isinstance(error, json.JSONDecodeError):
        return ModelOutputInvalid(stage, error.doc[:_RAW_CHARS], f"the server's reply is not JSON: {error}")
    if isinstance(error, openai.APIResponseValidationError):
        return ModelOutputInvalid(stage, error.response.text[:_RAW_CHARS], f"the server's reply is malformed: {error}")
    if isinstance(error, openai.APIStatusError) and not is_transient(error):
        return ModelRequestRejected(stage, error.status_code, error.response.text)
    return ModelUnavailable(stage, attempts, error)


def retry_after_s(error: BaseException | None) -> float:
    """The server's `Retry-After` hint in seconds (0 when absent or not a number)."""
    response = getattr(error, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return max(0.0, float(value)) if value else 0.0
    except ValueError:
        return 0.0  # an HTTP date: rare from model servers, and the backoff still applies


def _wait(settings: RetrySettings) -> Callable[[RetryCallState], float]:
    backoff = wait_exponential_jitter(initial=settings.backoff_s, max=settings.max_backoff_s, jitter=settings.backoff_s)

    def wait(state: RetryCallState) -> float:
        hinted = retry_after_s(state.outcome.exception() if state.outcome else None)
        return max(min(settings.max_backoff_s, backoff(state)), min(hinted, RETRY_AFTER_MOST_S))

    return wait


def _policy(settings: RetrySettings, on_retry: Callable[[], None]) -> dict[str, Any]:
    return {
        "stop": stop_after_attempt(settings.max_retries + 1),
        "wait": _wait(settings),
        "retry": retry_if_exception(is_transient),
        "before_sleep": lambda _state: on_retry(),
        "reraise": True,  # the last real error, not tenacity's RetryError
    }


async def call_async(
    stage: str, settings: RetrySettings, request: Callable[[], Awaitable[T]], on_retry: Callable[[], None]
) -> T:
    """`await request()`, retried on transient errors; raises a ModelError (see `as_model_error`)."""
    attempts = 0
    try:
        async for attempt in AsyncRetrying(**_policy(settings, on_retry)):
            with attempt:
                attempts += 1
                return await request()
    except SERVER_ERRORS as error:
        raise as_model_error(stage, attempts, error) from error
    raise AssertionError("unreachable: the retry loop returns or raises")


def call_sync(stage: str, settings: RetrySettings, request: Callable[[], T], on_retry: Callable[[], None]) -> T:
    """`request()`, retried on transient errors; raises a ModelError (see `as_model_error`)."""
    attempts = 0
    try:
        for attempt in Retrying(**_policy(settings, on_retry)):
            with attempt:
                attempts += 1
                return request()
    except SERVER_ERRORS as error:
        raise as_model_error(stage, attempts, error) from error
    raise AssertionError("unreachable: the retry loop returns or raises")
