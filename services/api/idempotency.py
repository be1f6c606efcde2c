"""Idempotent writes: a client's key makes a repeated AddMessages / CreateObservations return the first
reply (same ids, same consistency token) and append nothing; another request under a used key is refused.

Where the dedup lives: on the log and its projection, never in a process. Each event of a keyed append
carries a `KeyedRequest` (the key, its scope, a fingerprint of the request, and an id of this append).
The projector keeps the first append per (workspace, scope, key) in `idempotent_requests` with the ids
it created and the positions it reached, and drops the events of any later append under that key before
a handler sees them (projections/idempotency.py). A restarted or a second API process reads the reply
there.

The window between an append and its projection, and two processes racing on one key:
1. Fast path: the key's projected row, if whole, answers at once (a repeat appends nothing).
2. Otherwise the caller takes a Postgres advisory lock on (workspace, scope, key), which serialises the
   key across API processes (a lock, not a stored row: a dead process's connection drops it).
3. Holding it, it reads the row again. A holder lets go only once its own append is projected, so an
   earlier append under the key is in the row by now: found, it answers once the row is whole. Absent,
   it appends, waits until its own append is projected, and answers with the row: its own append, or,
   had one been appended by a holder that died before its projection, that earlier one (the projector
   dropped ours). That death frees the lock with its append unprojected, so the log can hold two appends
   under the key: the projector and every stream processor (services/bus/runner.py) keep the first and
   skip the other. It also frees it with its append part-way projected (the projector split it over two
   batches): the row then has some of the ids, and the holder waits for the rest rather than write again.
The locked part runs shielded from the call: a client that gives up (deadline, cancel) never frees the
key before its append is projected; if the projector is slow, the call answers UNAVAILABLE after the
consistency wait and a retry under the same key queues for the lock and gets the first reply.

The scope is the partition key of the events (`workspace/session`, `workspace/observer/observed`): one
partition orders every use of a key, so a rebuild keeps the same first append. A key is therefore
per session (AddMessages) or per pair (CreateObservations); the same key elsewhere is another write.
Cost: a keyed write answers once readable (like the control-plane writes), not at the durable ack: the
lock, the append, then the projector's lag (tests/bench/ingest.py --keys).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import orjson
from pydantic import BaseModel
from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from projections.idempotency import first_request
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.freshness import abandoned, answered_in_time, until_projected
from services.api.locks import GaveUp, held, slots
from services.errors import FailedPrecondition
from services.events import new_id
from services.events.requests import KeyedRequest

log = logging.getLogger(__name__)

Reply = tuple[list[str], str]  # the ids created, in request order, and the consistency token


@dataclass(frozen=True)
class Keyed:
    """A keyed request: where its key lives and what the client asked."""

    workspace_id: str
    scope: str
    key: str
    fingerprint: str
    size: int  # events the append writes; a projected row with fewer ids is not whole yet

    def request(self) -> KeyedRequest:
        """What this append's events carry (a fresh append id each time)."""
        return KeyedRequest(key=self.key, scope=self.scope, fingerprint=self.fingerprint, request_id=new_id())


def _plain(value: object) -> object:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot fingerprint {type(value).__name__}")


def keyed(workspace_id: str, scope: Sequence[str], key: str, items: Sequence[object]) -> Keyed | None:
    """The request as keyed (None without a key); `scope` are the values of the events' partition key,
    `items` what the client sent (dataclasses, values the server fills in left unset)."""
    if not key:
        return None
    v.check_id("idempotency_key", key)
    body = orjson.dumps([list(scope), list(items)], default=_plain, option=orjson.OPT_SORT_KEYS)
    return Keyed(workspace_id, "/".join(scope), key, hashlib.sha256(body).hexdigest(), len(items))


async def once(ctx: ApiDeps, k: Keyed | None, write: Callable[[KeyedRequest | None], Awaitable[Reply]]) -> Reply:
    """`write` once per key: the first reply for a repeat, FailedPrecondition for another request."""
    if k is None:
        return await write(None)
    found = await _reply(ctx, k)
    if found is not None:
        return found
    return await answered_in_time(
        ctx.freshness,
        _locked(ctx, k, write),
        f"the write under idempotency key {k.key!r}",
        "retry with the same key to get its reply",
        # this call waited behind an earlier write under its key, which may well be on the log
        not_written="retry with the same key: its reply is that of the first write under it",
    )


# a lock holder keeps one pooled connection and needs others meanwhile (the write's checks, the wait's
# polls): at most the pool's size of holders per engine, so the overflow always serves the rest
_HOLDERS: WeakKeyDictionary[AsyncEngine, asyncio.Semaphore] = WeakKeyDictionary()


async def _locked(ctx: ApiDeps, k: Keyed, write: Callable[[KeyedRequest | None], Awaitable[Reply]]) -> Reply:
    holders = slots(_HOLDERS, ctx.engine, ctx.engine.pool.size())
    async with held(ctx.engine, [(k.workspace_id, k.scope, k.key)], abandoned, holders) as conn:
        row = await _row(conn, k)
        if row is None:
            ids, token = await write(k.request())
            await until_projected(ctx.freshness, token)
            row = await _row(conn, k)
            if row is None:
                return ids, token  # nothing appended under the key: the write found its ids written before
        return await _whole(conn, k, row)


POLL_S = 0.05  # between two reads of a key's row that the projector has part of so far


async def _whole(conn: AsyncConnection, k: Keyed, row: RowMapping) -> Reply:
    """The reply in `row` once the projector has all of its append. The rest is in the same Kafka
    transaction, so it comes; written again instead, the request's ids in the row were refused as taken."""
    while (found := _judged(k, row)) is None:
        if abandoned():  # its caller was told to retry with the key: nothing to wait for
            raise GaveUp("its caller was answered while it waited for the rest of the first append")
        await asyncio.sleep(POLL_S)
        row = await _row(conn, k)
    return found


async def _reply(ctx: ApiDeps, k: Keyed) -> Reply | None:
    """The first reply under the key, once its append is wholly projected."""
    async with ctx.engine.connect() as conn:
        return _judged(k, await _row(conn, k))


async def _row(conn: AsyncConnection, k: Keyed) -> RowMapping | None:
    return await first_request(conn, k.workspace_id, k.scope, k.key)


def _judged(k: Keyed, row: RowMapping | None) -> Reply | None:
    """The reply `row` holds for `k`; None when there is no row or the projector has part of it so far,
    FailedPrecondition when the key stands for another request."""
    if row is None:
        return None
    if row["fingerprint"] != k.fingerprint:
        raise FailedPrecondition(
            f"idempotency key {k.key!r} was already used in {k.scope!r} for a different request (at "
            f"{row['recorded_at'].isoformat()}); send a new key for a new request, or resend the first "
            "request unchanged to get its reply"
        )
    if len(row["ids"]) < k.size:
        return None
    return list(row["ids"]), row["token"]
