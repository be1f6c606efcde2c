"""Waiting out a database outage: what counts as the database being away, and the policy that tries again
until it is back. The projector applies every batch through it; the API and the projector create their
schema through it at start, so a process started while Postgres restarts waits instead of exiting. A
rebuild runs through it whole, and waits out the broker too (its replay reads the log as a consumer,
which rides out an outage by itself, but it lists the partitions first)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from tenacity import RetryCallState, Retrying, retry_if_exception, retry_if_exception_type, wait_exponential_jitter

log = logging.getLogger(__name__)

# the database, not the work: refused or dropped connections (Postgres stopped, restarting, or cut off
# from us), an exhausted pool. What a batch can break on (a bad row) is DBAPIError, handled in apply.py
DATABASE_AWAY = (OperationalError, InterfaceError, PoolTimeout)
# a call to the broker that did not get through: it is stopped, restarting or cut off from us
_BROKER_AWAY = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN})


def broker_away(error: BaseException) -> bool:
    return isinstance(error, KafkaException) and error.args[0].code() in _BROKER_AWAY


# between tries while the database is away: from 0.1 s, doubling, at most 2 s apart, so work resumes
# within about 2 s of Postgres coming back
RETRY_FIRST_S, RETRY_MAX_S = 0.1, 2.0


def while_database_away(
    stop: threading.Event, what: str, on_wait: Callable[[], None] | None = None, broker_too: bool = False
) -> Retrying:
    """Tries a call again while the database (and with `broker_too`, the broker) is away, until it is
    back or `stop` is set; then the last error is raised. Safe only for work a try cut short leaves
    undone (one transaction, or idempotent). Each wait calls `on_wait` and logs, as `what`, at the first
    try and every 30th (about a minute)."""

    def before_sleep(state: RetryCallState) -> None:
        if on_wait is not None:
            on_wait()
        if state.attempt_number == 1 or state.attempt_number % 30 == 0:
            error = state.outcome.exception() if state.outcome else "?"
            away = "the broker" if isinstance(error, BaseException) and broker_away(error) else "the database"
            log.warning("%s: %s is unavailable (%s); trying again (try %d)", what, away, error, state.attempt_number)

    retry = retry_if_exception_type(DATABASE_AWAY)
    return Retrying(
        retry=retry | retry_if_exception(broker_away) if broker_too else retry,
        wait=wait_exponential_jitter(initial=RETRY_FIRST_S, max=RETRY_MAX_S),
        stop=lambda _: stop.is_set(),
        sleep=stop.wait,
        before_sleep=before_sleep,
        reraise=True,
    )
