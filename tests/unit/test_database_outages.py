"""What counts as the database being away (waited out by the projector, the API and webhook starts, a
rebuild) and what is an error of the work itself, raised at once: psycopg raises both as OperationalError."""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg import errors
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from projections.outages import database_away, database_error_line, while_database_away


def wrapped(error: Exception) -> OperationalError:
    """As SQLAlchemy raises it."""
    return OperationalError("SELECT 1", {}, error)


@pytest.mark.parametrize(
    "error",
    [
        psycopg.OperationalError("connection failed: Connection refused"),  # no SQLSTATE: no answer at all
        errors.ConnectionFailure("server closed the connection"),  # 08006
        errors.AdminShutdown("terminating connection due to administrator command"),  # 57P01
        errors.CrashShutdown("terminating connection due to crash of another server process"),  # 57P02
        errors.CannotConnectNow("the database system is starting up"),  # 57P03
    ],
)
def test_a_refused_or_dropped_connection_or_a_server_going_down_is_the_database_away(error):
    assert database_away(wrapped(error))


def test_a_closed_connection_and_an_exhausted_pool_are_the_database_away():
    assert database_away(InterfaceError("SELECT 1", {}, psycopg.InterfaceError("the connection is closed")))
    assert database_away(PoolTimeout("QueuePool limit reached"))


@pytest.mark.parametrize(
    "error",
    [
        errors.DeadlockDetected("deadlock detected"),  # 40P01: the projector's batch goes again
        errors.SerializationFailure("could not serialize access"),  # 40001
        errors.TooManyConnections("sorry, too many clients already"),  # 53300
        errors.DiskFull("could not extend file"),  # 53100: an operator frees space, the projector goes on
    ],
)
def test_a_deadlock_or_a_server_short_of_resources_passes_and_is_waited_out(error):
    assert isinstance(error, psycopg.OperationalError)
    assert database_away(wrapped(error))


def test_a_statement_timeout_is_not_the_database_away():
    error = errors.QueryCanceled("canceling statement due to statement timeout")  # 57014
    assert isinstance(error, psycopg.OperationalError)  # what made it look like an outage
    assert not database_away(wrapped(error))


def test_an_error_of_the_data_is_not_the_database_away():
    assert not database_away(IntegrityError("INSERT", {}, errors.UniqueViolation("duplicate key")))


def test_an_error_that_is_no_outage_is_raised_at_once_and_an_outage_is_waited_out():
    tries = []

    def timing_out():
        tries.append(1)
        raise wrapped(errors.QueryCanceled("canceling statement due to statement timeout"))

    with pytest.raises(OperationalError):
        while_database_away(threading.Event(), "test")(timing_out)
    assert len(tries) == 1  # before, it was tried again forever as "the database is unavailable"

    def away_twice():
        tries.append(1)
        if len(tries) < 4:
            raise wrapped(psycopg.OperationalError("connection failed: Connection refused"))
        return "done"

    assert while_database_away(threading.Event(), "test")(away_twice) == "done" and len(tries) == 4


def test_the_line_for_an_error_names_its_class_sqlstate_and_first_line():
    error = wrapped(errors.QueryCanceled("canceling statement due to statement timeout\nCONTEXT: x"))
    assert database_error_line(error) == "QueryCanceled (SQLSTATE 57014): canceling statement due to statement timeout"
