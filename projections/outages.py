"""Waiting out a database outage: what counts as the database being away, and the policy that tries again
until it is back. The projector applies every batch through it; the API and the projector create their
schema through it at start, so a process started while Postgres restarts waits instead of exiting. A
rebuild runs through it whole, and waits out the broker too (its replay reads the log as a consumer,
which rides out an outage by itself, but it lists the partitions first).

What counts (`database_away`): a failure to reach the database, and what passes by itself (a deadlock or
serialization failure, which the transaction's retry resolves; too many connections, a full disk, out of
memory, which an operator or the load resolves). Not a statement timeout, nor any refusal of the work
itself (psycopg raises a timeout as OperationalError too, and waiting would repeat it forever)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential_jitter

log = logging.getLogger(__name__)

# the errors an outage of the database surfaces as (those that are one: `database_away`). What a batch can
# break on (a bad row) is DBAPIError, handled in apply.py
DATABASE_AWAY = (OperationalError, InterfaceError, PoolTimeout)
# SQLSTATEs of a connection that failed or was ended by the server: class 08 (connection exception) and
# 57P01-57P03 (admin shutdown, crash shutdown, cannot connect now: Postgres stopping or starting)
# and classes 40 (transaction rollback: a deadlock, a serialization failure) and 53 (insufficient resources:
# too many connections, a full disk, out of memory): they pass, by a retry or an operator's hand
_PASSING_CLASSES = ("08", "40", "53")
_SERVER_GOING = frozenset({"57P01", "57P02", "57P03"})
# a call to the broker that did not get through: it is stopped, restarting or cut off from us
_BROKER_AWAY = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN})


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE Postgres answered with, if it answered (psycopg's, under SQLAlchemy's wrapper)."""
    return getattr(getattr(error, "orig", error), "sqlstate", None)


def database_away(error: BaseException) -> bool:
    """Whether `error` says the database could not be reached (refused or dropped connection, Postgres
    shutting down or starting, an exhausted pool) or is one that passes (see the module's docstring), not
    that it refused the work."""
    if isinstance(error, (InterfaceError, PoolTimeout)):
        return True
    if not isinstance(error, OperationalError):
        return False
    state = sqlstate(error)
    # no SQLSTATE: the client lost the server (refused, reset, closed) before any answer
    return state is None or state.startswith(_PASSING_CLASSES) or state in _SERVER_GOING


def past_a_limit(error: BaseException) -> bool:
    """Whether Postgres refused a statement for one of its fixed limits (SQLSTATE class 54: an index entry
    over 2,704 bytes, too many columns or arguments): the same event is refused so at every try."""
    return (sqlstate(error) or "").startswith("54")


def database_error_line(error: BaseException) -> str:
    """One line naming what Postgres refused: its error class, SQLSTATE and first line of its message."""
    orig = getattr(error, "orig", None) or error
    state = sqlstate(error)
    first = (str(orig).strip().splitlines() or [""])[0]
    return f"{type(orig).__name__}" + (f" (SQLSTATE {state})" if state else "") + f": {first}"


def broker_away(error: BaseException) -> bool:
    return isinstance(error, KafkaException) and error.args[0].code() in _BROKER_AWAY


# between tries while the database is away: from 0.1 s, doubling, at most 2 s apart, so work resumes
# within about 2 s of Postgres coming back
RETRY_FIRST_S, RETRY_MAX_S = 0.1, 2.0


def while_database_away(
    stop: threading.Event, what: str, on_wait: Callable[[], None] | None = None, broker_too: bool = False
) -> Retrying:
    """Tries a call again while the database (and with `broker_too`, the broker) is away (`database_away`),
    until it is back or `stop` is set; then the last error is raised. Any other error is raised at once.
    Safe only for work a try cut short leaves undone (one transaction, or idempotent). Each wait calls
    `on_wait` and logs, as `what`, at the first try and every 30th (about a minute)."""

    def before_sleep(state: RetryCallState) -> None:
        if on_wait is not None:
            on_wait()
        if state.attempt_number == 1 or state.attempt_number % 30 == 0:
            error = state.outcome.exception() if state.outcome else "?"
            away = "the broker" if isinstance(error, BaseException) and broker_away(error) else "the database"
            said = database_error_line(error) if isinstance(error, BaseException) and away == "the database" else error
            log.warning("%s: %s is unavailable (%s); trying again (try %d)", what, away, said, state.attempt_number)

    retry = retry_if_exception(database_away)
    return Retrying(
        retry=retry | retry_if_exception(broker_away) if broker_too else retry,
        wait=wait_exponential_jitter(initial=RETRY_FIRST_S, max=RETRY_MAX_S),
        stop=lambda _: stop.is_set(),
        sleep=stop.wait,
        before_sleep=before_sleep,
        reraise=True,
    )
