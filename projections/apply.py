"""Apply a batch of log records to a projection schema, exactly once.

The rows an event produces and the partition offsets it advances are written in one transaction,
and records below a partition's stored offset are skipped, so redelivery after a crash or a
rebalance changes nothing. A record that cannot be read or applied is parked in `quarantine`.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby

from sqlalchemy import Connection, func, select, text, tuple_
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError

from projections import idempotency
from projections.db import mapped_schema
from projections.handlers import HANDLERS
from projections.lexicon import count_lexemes, forget_lexemes
from projections.outages import DATABASE_AWAY, past_a_limit
from projections.schema import projection_offsets, quarantine
from services.events import Event, EventDecodeError, MessageAppended, MessagesEmbedded, decode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    """One log record as the projector sees it (independent of the Kafka client)."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: bytes
    logged_at: datetime | None = None


@dataclass(frozen=True)
class Decoded:
    """A batch's records read into events: (record, event) for each readable one, (record, why) for each other."""

    events: list[tuple[Record, Event]]
    bad: list[tuple[Record, str]]


@dataclass(frozen=True)
class Applied:
    events: int
    skipped: int
    parked: tuple[Record, ...] = ()  # the records set aside in `quarantine`

    @property
    def quarantined(self) -> int:
        return len(self.parked)


def stored_offsets(conn: Connection, partitions: set[tuple[str, int]], lock: bool = False):
    """{(topic, partition): next offset to apply} for the given partitions."""
    if not partitions:
        return {}
    if lock:
        # a partition's first batch has no row to lock: make one, so a second incarnation applying the same
        # records (a fenced member still in its transaction) waits here for the first, then skips them
        first = insert(projection_offsets).on_conflict_do_nothing()
        conn.execute(first, [dict(topic=t, partition=p, next_offset=0) for t, p in sorted(partitions)])
    t = projection_offsets.c
    stmt = select(t.topic, t.partition, t.next_offset).where(tuple_(t.topic, t.partition).in_(sorted(partitions)))
    rows = conn.execute(stmt.with_for_update() if lock else stmt)
    return {(topic, part): nxt for topic, part, nxt in rows}


def apply_batch(conn: Connection, records: Sequence[Record], ahead: Decoded | None = None) -> Applied:
    """Apply `records` (in log order per partition) inside the caller's transaction. `ahead` is
    decode_all(records) when the caller decoded them already (a rebuild, while the previous batch was
    being written)."""
    done = stored_offsets(conn, {(r.topic, r.partition) for r in records}, lock=True)

    def is_fresh(r: Record) -> bool:
        return r.offset >= done.get((r.topic, r.partition), 0)

    fresh = [r for r in records if is_fresh(r)]
    if ahead is None:
        ahead = decode_all(fresh)
    decoded = [(r, e) for r, e in ahead.events if is_fresh(r)]
    bad = [(r, why) for r, why in ahead.bad if is_fresh(r)]
    decoded = idempotency.screen(conn, decoded)  # a later append under a used key is a no-op
    hold_sessions(conn, [event for _, event in decoded])
    forget_lexemes(conn)  # what a batch that failed on this pooled connection before left noted
    try:
        with conn.begin_nested():
            _apply_runs(conn, [event for _, event in decoded])
    except Exception as exc:
        if _unwell(exc):
            raise  # retry the whole batch later, never quarantine for it
        # one event broke the bulk write (a row Postgres refused, or a handler's Python error): redo one by
        # one and park just the culprits
        forget_lexemes(conn)
        bad += _apply_one_by_one(conn, decoded)
    count_lexemes(conn)
    _park(conn, bad)
    _advance(conn, fresh)
    return Applied(events=len(fresh) - len(bad), skipped=len(records) - len(fresh), parked=tuple(r for r, _ in bad))


# events whose rows meet across topics: a message (sessions topic) and its vector (message-embeddings topic),
# which projector processes sharing the partitions may apply at once (hold_sessions)
_MEET = (MessageAppended, MessagesEmbedded)


def hold_sessions(conn: Connection, events: Sequence[Event]) -> None:
    """Hold, until the transaction ends, a lock per session whose messages or vectors `events` write, taken
    in one order (no deadlock between batches). Without it, a vector applied while another process's
    transaction inserting its message was still open could not see the message and waited in the pending
    table, where the message's insert had already looked and found nothing: the message never got its
    vector. With it, the second transaction sees what the first committed. Keys are the projection
    schema's own (as the API's locks), and of another space than the API's session locks."""
    schema = mapped_schema(conn) or ""
    keys = sorted({_lock_key(schema, e.workspace_id, e.session_id) for e in events if isinstance(e, _MEET)})
    if keys:
        conn.execute(_HOLD, {"keys": keys})


_HOLD = text("SELECT pg_advisory_xact_lock(k) FROM (SELECT unnest(CAST(:keys AS bigint[])) AS k OFFSET 0) AS held")


def _lock_key(*parts: str) -> int:
    return int.from_bytes(
        hashlib.sha256("\0".join(("projector-session", *parts)).encode()).digest()[:8], "big", signed=True
    )


def decode_all(records: Sequence[Record]) -> Decoded:
    """Read every record's event; one that cannot be read is set aside with the reason."""
    decoded = Decoded(events=[], bad=[])
    for r in records:
        try:
            decoded.events.append((r, decode(r.value)))
        except EventDecodeError as exc:
            decoded.bad.append((r, str(exc)))
    return decoded


def _runs(events: Sequence[Event]) -> Iterator[list[Event]]:
    # consecutive events of one type are applied together, keeping the log's order between types
    for _, run in groupby(events, key=type):
        yield list(run)


def _apply_runs(conn: Connection, events: Sequence[Event]) -> None:
    for run in _runs(events):
        HANDLERS[type(run[0])](conn, run)


def _apply_one_by_one(conn: Connection, decoded) -> list[tuple[Record, str]]:
    bad = []
    for record, event in decoded:
        try:
            with conn.begin_nested():
                HANDLERS[type(event)](conn, [event])
        except Exception as exc:
            if _unwell(exc):
                raise
            bad.append((record, _reason(record, event, exc)))
    return bad


def _reason(record: Record, event: Event, exc: Exception) -> str:
    """Why `event` is parked. A Python error (a TypeError, an OverflowError) had ended the projector's run,
    and a restart met the same event again, for good; it is a fault of the code or of a value it did not
    expect, so its traceback is logged for whoever fixes it."""
    if isinstance(exc, DBAPIError):
        return f"could not apply {event.type}: {exc.orig}"
    log.error(
        "projector: the handler of %s raised at %s partition %d offset %d",
        event.type,
        record.topic,
        record.partition,
        record.offset,
        exc_info=exc,
    )
    return f"could not apply {event.type}: {type(exc).__name__}: {exc}"


def _unwell(exc: Exception) -> bool:
    """The process or the database is unwell, not the event: the database is away or timed the statement out
    (an OperationalError, as outages.DATABASE_AWAY has it), unless a fixed limit of Postgres refused the
    event's row, which it would at every try (then the batch stalled the projector for good: an observation
    whose ids and vector passed a btree entry's 2,704 bytes); or memory ran short, which passes."""
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, DATABASE_AWAY) and not past_a_limit(exc)


def _park(conn: Connection, bad: list[tuple[Record, str]]) -> None:
    for r, reason in bad:
        # a parked record is never projected: an acknowledged write that never becomes readable, with no lag to
        # show for it; the payload is not logged (it may hold users' words)
        log.error(
            "projector parked a record in quarantine: topic %s partition %d offset %d: %s",
            r.topic,
            r.partition,
            r.offset,
            _without_values(reason),
        )
    if bad:
        rows = [
            dict(
                topic=r.topic,
                partition=r.partition,
                offset=r.offset,
                key=_text(r.key),
                reason=_text(reason),
                payload=r.value,
                logged_at=r.logged_at,
            )
            for r, reason in bad
        ]
        conn.execute(insert(quarantine).on_conflict_do_nothing(), rows)


# pydantic quotes the value it refused in its errors (the start and end of a whole event, with its content)
_INPUT = re.compile(r"input_value=.*?, input_type=")


def _without_values(reason: str) -> str:
    """`reason` without what it quotes of the record (the quarantine row keeps it whole): pydantic's input
    values, and Postgres' DETAIL on (the failing row, a key's values)."""
    return _INPUT.sub("input_value=..., input_type=", reason.split("\nDETAIL:")[0])


def _text(value: str | None) -> str | None:
    """`value` as Postgres text holds it: a NUL (a foreign record's binary key, quoted in the reason) made
    the quarantine's own insert fail, and the projector stop at that record for good."""
    return value.replace("\x00", "\ufffd") if value is not None else None


def _advance(conn: Connection, records: Sequence[Record]) -> None:
    last: dict[tuple[str, int], int] = {}
    for r in records:
        last[(r.topic, r.partition)] = max(r.offset, last.get((r.topic, r.partition), -1))
    if not last:
        return
    rows = [dict(topic=t, partition=p, next_offset=o + 1) for (t, p), o in last.items()]
    stmt = insert(projection_offsets)
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["topic", "partition"],
            # never backwards: what an offset says was applied stays applied
            set_={"next_offset": func.greatest(projection_offsets.c.next_offset, stmt.excluded.next_offset)},
        ),
        rows,
    )
