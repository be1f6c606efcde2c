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
3. Holding it, it waits until the projections hold every record committed on the topic so far
   (`Freshness.settle`); an earlier holder's append was acknowledged before it let go, so it is in the
   projection now. The row is read again: found, it answers; absent, the write appends, still holding
   the lock. The locked part is shielded from the call's cancellation, so a client that gives up
   mid-append never frees the key before its append has landed.
So a second caller never appends a duplicate; if one ever reaches the log (a process that died mid-commit
and whose transaction completed later), the projector's rule above still keeps the first.

The scope is the partition key of the events (`workspace/session`, `workspace/observer/observed`): one
partition orders every use of a key, so a rebuild keeps the same first append. A key is therefore
per session (AddMessages) or per pair (CreateObservations); the same key elsewhere is another write.
Cost: a first use of a key pays the lock, one watermark read per partition of the topic and a wait for
the projector to catch up (tests/bench/ingest.py --keys).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import orjson
import uuid6
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from projections.idempotency import first_request
from services.api import validation as v
from services.api.context import ApiContext
from services.bus.topics import TopicSpec
from services.errors import FailedPrecondition
from services.events.requests import KeyedRequest

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
        return KeyedRequest(key=self.key, scope=self.scope, fingerprint=self.fingerprint,
                            request_id=str(uuid6.uuid7()))


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


async def once(ctx: ApiContext, k: Keyed | None, topic: TopicSpec,
               write: Callable[[KeyedRequest | None], Awaitable[Reply]]) -> Reply:
    """`write` once per key: the first reply for a repeat, FailedPrecondition for another request."""
    if k is None:
        return await write(None)
    found = await _reply(ctx, k)
    if found is not None:
        return found
    task = asyncio.ensure_future(_locked(ctx, k, topic, write))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())  # the caller may be gone
    return await asyncio.shield(task)


# a lock holder keeps one pooled connection and needs another now and then (the settle's polls, the
# write's checks): at most the pool's size of holders per engine, so the overflow always serves the rest
_HOLDERS: WeakKeyDictionary[AsyncEngine, asyncio.Semaphore] = WeakKeyDictionary()


async def _locked(ctx: ApiContext, k: Keyed, topic: TopicSpec,
                  write: Callable[[KeyedRequest | None], Awaitable[Reply]]) -> Reply:
    lock = int.from_bytes(hashlib.sha256(f"{k.workspace_id}\0{k.scope}\0{k.key}".encode()).digest()[:8],
                          "big", signed=True)
    holders = _HOLDERS.setdefault(ctx.engine, asyncio.Semaphore(max(1, ctx.engine.pool.size())))
    async with holders, ctx.engine.connect() as conn:
        await conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": lock})
        try:
            await ctx.freshness.settle(topic)
            found = await _reply(ctx, k, whole=False, conn=conn)
            return found if found is not None else await write(k.request())
        finally:
            await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": lock})


async def _reply(ctx: ApiContext, k: Keyed, whole: bool = True, conn: AsyncConnection | None = None
                 ) -> Reply | None:
    """The first reply under the key, if projected (and, with `whole`, only once every id is)."""
    if conn is None:
        async with ctx.engine.connect() as conn:
            return await _reply(ctx, k, whole, conn)
    row = await first_request(conn, k.workspace_id, k.scope, k.key)
    if row is None:
        return None
    if row["fingerprint"] != k.fingerprint:
        raise FailedPrecondition(
            f"idempotency key {k.key!r} was already used in {k.scope!r} for a different request (at "
            f"{row['recorded_at'].isoformat()}); send a new key for a new request, or resend the first "
            "request unchanged to get its reply")
    if whole and len(row["ids"]) < k.size:
        return None  # its append is still being projected: settle under the lock
    return list(row["ids"]), row["token"]
