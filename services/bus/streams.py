"""Reading log records as events inside a processor."""

from __future__ import annotations

import logging

from services.events import Event, EventDecodeError, decode

log = logging.getLogger(__name__)


def read(raw: bytes) -> Event | None:
    """Decode a record. An unreadable one is logged and skipped, as the projector quarantines it:
    stopping would hold up every other key on the partition behind one bad record."""
    try:
        return decode(raw)
    except EventDecodeError as exc:
        log.error("skipping unreadable record: %s", exc)
        return None
