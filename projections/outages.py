"""Waiting out a database outage: what counts as the database being away, and the policy that tries again
until it is back. The projector applies every batch through it; the API and the projector create their
schema through it at start, so a process started while Postgres restarts waits instead of exiting."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential_jitter

log = logging.getLogger(__name__)

# the database, not the work: refused or dropped connections (Postgres stopped, restarting, or cut off
# from us), an exhausted pool. What a batch can break on (a bad row) is DBAPIError, handled in apply.py
DATABASE_AWAY = (OperationalError, InterfaceError, PoolTimeout)
# between tries while the database is away: from 0.1 s, doubling, at most 2 s apart, so work resumes
# within about 2 s of Postgres coming back
RETRY_FIRST_S, RETRY_MAX_S = 0.1, 2.0


def while_database_away(stop: threading.Event, what: str, on_wait: Callable[[], None] | None = None) -> Retrying:
    """Tries a call again while the database is away, until it is back or `stop` is set; then the last
    error is raised. Safe only for work a try cut short leaves undone (one transaction, or idempotent).
    Each wait calls `on_wait` and logs, as `what`, at the first try and every 30th (about a minute)."""

    def before_sleep(state: RetryCallState) -> None:
        if on_wait is not None:
            on_wait()
        if state.attempt_number == 1 or state.attempt_number % 30 == 0:
            error = state.outcome.exception() if state.outcome else "?"
            log.warning("%s: database unavailable (%s); trying again (try %d)", what, error, state.attempt_number)

    return Retrying(
        retry=retry_if_exception_type(DATABASE_AWAY),
        wait=wait_exponential_jitter(initial=RETRY_FIRST_S, max=RETRY_MAX_S),
        stop=lambda _: stop.is_set(),
        sleep=stop.wait,
        before_sleep=before_sleep,
        reraise=True,
    )
