"""Times that follow log order. A row read back as "the latest" by its time must be the latest on the log:
events are stamped by the clock of the host that made them, and two API hosts (or an API and a worker)
whose clocks differ stamp a later event earlier. The projection keeps each such row's time just after the
one before it, in the order it applies them, which is log order; a rebuild reaches the same times."""

from __future__ import annotations

from datetime import datetime, timedelta

TICK = timedelta(microseconds=1)  # Postgres's timestamp resolution


def after(previous: datetime | None, stamped: datetime) -> datetime:
    """`stamped`, or just after `previous` when the event was stamped no later than the row before it."""
    return stamped if previous is None or stamped > previous else previous + TICK
