"""Read-your-writes: wait until the projections include the positions in a consistency token."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from services.api.locks import shielded, started
from services.api.projected import ProjectedPositions
from services.bus.consistency import ConsistencyToken, InvalidConsistencyToken
from services.bus.log_ends import LogEnds
from services.errors import Unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")


class Freshness:
    def __init__(self, projected: ProjectedPositions, timeout_s: float, ends: LogEnds | None = None) -> None:
        self._projected = projected
        self._timeout_s = timeout_s
        self._ends = ends  # None: no check against the log (a token is only waited for)

    @property
    def timeout_s(self) -> float:
        """How long `wait` waits before it gives up."""
        return self._timeout_s

    async def wait(self, token: ConsistencyToken | str | None) -> None:
        """Return once every (topic, partition, offset) of `token` is projected; else Unavailable."""
        if isinstance(token, str):
            token = ConsistencyToken.decode(token)
        if not token or not token.offsets:
            return
        deadline = time.monotonic() + self._timeout_s  # the check against the log's end keeps to it too
        if self._ends is None:
            projected = await self._projected.until(token.offsets, deadline)
        else:
            projected = await self._checked_until(token, self._ends, deadline)
        if not projected:
            raise Unavailable(
                f"the projections have not caught up with consistency token {token.encode()!r} "
                f"after {self._timeout_s:g} s; the projector may be down or far behind"
            )

    async def _checked_until(self, token: ConsistencyToken, ends: LogEnds, deadline: float) -> bool:
        """The wait for `token`, with the token checked against the log meanwhile: what no write can have made
        would only hold the call, then fail. Side by side, as the check may need the broker, which can hang:
        the read of a write already projected then still answers. A position the projector passed is a record
        on the log, which no answer of the broker can refuse, so the check is left unfinished then."""
        ends.check_topics(token)  # needs no broker: refused whatever the projector holds
        checking = asyncio.ensure_future(ends.check(token, deadline))
        waiting = asyncio.ensure_future(self._projected.until(token.offsets, deadline))
        waiting.add_done_callback(lambda f: f.cancelled() or f.exception())  # raised below, or moot once refused
        try:
            await asyncio.wait({checking, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if checking.done() or not (waiting.result() and _records_only(token)):
                await checking  # over by the deadline; refuses the token if the broker answered in time
            return await waiting
        finally:
            checking.cancel()
            waiting.cancel()


def _records_only(token: ConsistencyToken) -> bool:
    """Whether every offset of `token` names a record: a negative one is "projected" before any write, so
    only the check can refuse its partition."""
    return all(offset >= 0 for offset in token.offsets.values())


RETRY_S = 0.1  # between two waits of a lock holder for the projector, after one ended in an error


async def until_projected(freshness: Freshness, token: str) -> None:
    """Wait, however long, until `token` is projected: a lock held over a write is let go only once a
    later holder's check can see what it wrote. Any failure of a wait (the projector behind, a pool
    timeout, a dropped connection) is waited out; given up, the lock let a second write of the entity in."""
    while True:
        try:
            return await freshness.wait(token)
        except InvalidConsistencyToken:
            raise
        except Exception as exc:  # noqa: BLE001 - see above: only a token that can never be projected ends it
            log.warning("a write holding a lock waits for the projector (%s); the lock stays held meanwhile", exc)
            await asyncio.sleep(RETRY_S)  # and the event loop turns, even when a wait fails at once


@dataclass
class Attempt:
    """A write answered in time or not (answered_in_time): whether its append began and whether it
    returned, and whether its caller was told first that nothing was written (then it must not begin)."""

    appending: bool = False
    appended: bool = False
    abandoned: bool = False


ATTEMPT: ContextVar[Attempt | None] = ContextVar("attempt", default=None)


def abandoned() -> bool:
    """Whether the caller of this task's write was told that nothing was written: a lock it still waits for
    is then of no use to it (locks.held's `gave_up`)."""
    attempt = ATTEMPT.get()
    return attempt is not None and attempt.abandoned


def begin_append() -> Attempt | None:
    """Mark the write of this task as appending (writes.commit calls it right before the append, and sets
    `appended` once the append returned); refused when its caller was told that nothing was written."""
    attempt = ATTEMPT.get()
    if attempt is None:
        return None
    if attempt.abandoned:
        raise Unavailable("its caller was told nothing was written, so it is not appended now")
    attempt.appending = True
    return attempt


async def answered_in_time(
    freshness: Freshness,
    work: Coroutine[Any, Any, T],
    what: str,
    then: str,
    keyed: bool = False,
    not_written: str = "send it again",
) -> T:
    """The result of `work` (a write under a lock, shielded: it runs to its end whatever the caller does),
    if it comes within the consistency wait; else UNAVAILABLE saying how far it got: on the log (and what
    to do `then`), or not known yet (its append still running), or not written (it still waited for a lock
    another write holds; what to do: `not_written`), and then `work` appends nothing. `keyed`: under an
    idempotency key, whose wait (idempotency.once) bounds it already."""
    if keyed:
        return await shielded(work)
    attempt = Attempt()
    before = ATTEMPT.set(attempt)
    try:
        held = started(work)  # its task's context is a copy of this one: with the attempt
    finally:
        ATTEMPT.reset(before)
    try:
        return await asyncio.wait_for(asyncio.shield(held), freshness.timeout_s)
    except TimeoutError:
        late = f"after {freshness.timeout_s:g} s"
        if attempt.appended:
            raise Unavailable(
                f"{what} is on the log but not readable {late} (the projector may be behind); {then}"
            ) from None
        if attempt.appending:
            raise Unavailable(
                f"{what} may be on the log: its append had not returned {late}; send it again only as it was "
                "(the same ids or idempotency key), which returns it if it landed"
            ) from None
        attempt.abandoned = True
        raise Unavailable(
            f"{what}: this call appended nothing: {late} it still waited for another write (of the same ids or "
            f"key, or a change of the session's members), not yet readable (the projector may be behind); "
            f"{not_written}"
        ) from None
