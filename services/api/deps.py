"""What the API's service functions need: the projections, the log, freshness, the embedding model,
Chat's tool loop and who we are."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.api.backpressure import Backpressure
from services.api.cursors import PageCursors
from services.api.freshness import Freshness, until_projected
from services.api.locks import GaveUp, KeyedLocks, held, unheld
from services.bus.producer import EventLog
from services.dialectic.loop import Dialectic
from services.errors import Unavailable
from services.events import Configuration, ProducerInfo
from services.llm.embeddings import Embedder
from services.llm.rerank import Reranker
from services.settings import Settings

API_PRODUCER = ProducerInfo(component="api", version="0.1.0")
# the appends (tasks, each ending in its consistency token) a block under `ApiDeps.exclusive` began:
# writes.commit notes them there
WRITTEN_UNDER_LOCK: ContextVar[list[asyncio.Future] | None] = ContextVar("written_under_lock", default=None)
log = logging.getLogger(__name__)


async def _first_of(acquired: asyncio.Event, holder: asyncio.Future, timeout_s: float, key: tuple[str, ...]) -> None:
    """Return once `acquired` is set; raise the holder's error if it ends first (the database is away), and
    UNAVAILABLE after `timeout_s`: the key is held by a write not yet readable, or every holder's slot is."""
    waiting = asyncio.ensure_future(acquired.wait())
    try:
        await asyncio.wait({waiting, holder}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    if acquired.is_set():
        return
    if holder.done():
        holder.result()
    raise Unavailable(
        f"{key[0]} {key[-1]!r} waited {timeout_s:g} s for a lock: another write of it, or enough others of this "
        "server to take every lock, are not readable yet (the projector may be behind); nothing was written: "
        "send it again"
    )


def _logged(holder: asyncio.Future) -> None:
    """A holder that ended in an error let its lock go early: say so (its block heard of it if it waited)."""
    if not holder.cancelled() and holder.exception() is not None:
        log.warning("the lock of a control-plane write ended in an error: %r", holder.exception())


@dataclass(frozen=True)
class ApiDeps:
    """The dependencies every API service function is given (its `ctx`): one container per server, built
    in server.py. Not GetContext (that read is context_reads.py) nor gRPC's per-call context."""

    engine: AsyncEngine
    log: EventLog
    freshness: Freshness
    backpressure: Backpressure
    embedder: Embedder  # one per server: the local model loads once, on first use
    reranker: Reranker | None = None  # SearchMessages' rerank option; None: the server runs without one
    producer: ProducerInfo = API_PRODUCER
    dialectic: Dialectic | None = None  # Chat's tool loop, with one model client per reasoning level
    cursors: PageCursors = field(default_factory=lambda: PageCursors.from_setting(""))  # signs page tokens
    # control-plane writes check the projection, then append: per entity, one at a time (`exclusive`)
    writes: KeyedLocks = field(default_factory=KeyedLocks)
    # the global level of the configuration hierarchy (the environment)
    configuration: Configuration = field(default_factory=lambda: Settings().configuration())

    @asynccontextmanager
    async def exclusive(self, *key: str) -> AsyncIterator[None]:
        """A control-plane write's check-then-append on one entity (`key`, such as ("session", w, s)), one at
        a time across API processes: a lock per key in this process, so a key takes one connection, and a
        Postgres advisory lock across them. Two processes creating one session each appended a create and
        its joins, and were both told they created it; both clones of one target were copied into it.

        A task of its own holds the lock, and lets it go only once what the block appended (`commit`) is
        readable: the block may give up waiting for that (UNAVAILABLE), and the next writer's check must
        still see the write. Let go at once, a second clone into one id copied the source again."""
        acquired, finished, written = asyncio.Event(), asyncio.Event(), []
        holder = asyncio.ensure_future(self._hold(key, acquired, finished, written))
        holder.add_done_callback(_logged)
        try:
            await _first_of(acquired, holder, self.freshness.timeout_s, key)
            before = WRITTEN_UNDER_LOCK.set(written)
            try:
                yield
            finally:
                WRITTEN_UNDER_LOCK.reset(before)
        finally:
            finished.set()

    async def unheld(self, *key: str) -> bool:
        """Whether no write holds `key` now, here or on another API process: every write of it answered
        before is then readable, so a read of the projection answers as the lock would (a get's fast path)."""
        return key not in self.writes and await unheld(self.engine, key)

    async def _hold(
        self, key: tuple[str, ...], acquired: asyncio.Event, finished: asyncio.Event, written: list
    ) -> None:
        try:
            async with self.writes.hold(key), held(self.engine, [key], finished.is_set):
                if finished.is_set():  # its caller gave up waiting for it
                    return
                acquired.set()
                await finished.wait()
                for appending in written:
                    try:
                        token = await appending
                    except Exception:  # noqa: BLE001 - not appended (an unconfirmed commit waits for its outcome)
                        continue
                    await until_projected(self.freshness, token.encode())
        except GaveUp:  # its caller gave up waiting while the lock was held elsewhere: nothing to hold
            return

    @asynccontextmanager
    async def embedding(self, text: str) -> AsyncIterator[asyncio.Future]:
        """The vector of `text` (None for no text) as a future, computed in a thread (ONNX Runtime runs
        without the GIL) while the caller reads what does not need it."""
        future = asyncio.ensure_future(self._embed(text))
        try:
            yield future
        finally:
            if not future.done():  # the caller failed: let the thread finish, nobody needs its vector
                future.add_done_callback(lambda f: f.exception())

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[AsyncConnection]:
        """A connection whose statements all read one snapshot: a read-only REPEATABLE READ transaction.

        The engine autocommits, so each statement reads its own snapshot; a read that builds one answer
        from several statements (GetContext) could otherwise pair a card or summary from before a projected
        batch with messages from after it. The isolation level is reset when the connection goes back."""
        async with self.engine.connect() as conn:
            await conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
            async with conn.begin():
                yield conn

    async def _embed(self, text: str) -> list[float] | None:
        return (await self.embedder.embed([text]))[0] if text else None
