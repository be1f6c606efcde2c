"""The embedder's shell: session events in, MessagesEmbedded out; per session, its state is the last
turn (what the next message is embedded with), kept in the changelog like any processor's state.

The runner handles keys concurrently, one event per key at a time, so a single handle call only ever
sees one message. Texts of concurrent calls (other sessions of the same batch) are coalesced into one
model call (`Coalescer`): measured with the local MiniLM on 2 cores (2 ONNX threads), one text per call
costs 3.8 ms, batches of 8–256 2.6–2.9 ms per text; an HTTP embedder saves a round trip per text. A busy
single session still embeds one message at a time (its events must stay in order within the key).

A text the model refuses for good (a 4xx, a vector it cannot give) goes without one; see Coalescer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from services.bus.runner import Get, Step
from services.bus.takeover import TransactionFailed
from services.bus.topics import SESSIONS
from services.embedder.policy import after, embedded, text_to_embed
from services.embedder.refusals import vectors_or_none
from services.events import Event, MessageAppended, ProducerInfo
from services.llm.embeddings import Embedder, make_embedder
from services.llm.errors import EmbeddingError, ModelError

if TYPE_CHECKING:
    from services.settings import Settings

log = logging.getLogger(__name__)
# what a model answers the same on every retry: a refused request (a text past the server's token limit),
# or a reply with no usable vector (wrong size or count, NaN). Not an outage (ModelUnavailable), which
# aborts the batch so it is retried


class Coalescer:
    """Gathers the texts asked for within one event-loop turn and embeds them in one call.

    A text the model refuses for good gets None, not a vector: there is no dead-letter event for a message's
    embedding, and failing would stop the worker on that message forever. The batch is split to find it,
    so its neighbours still get theirs; it counts as the text's fault only if the model then embeds a plain
    text, since a model refusing everything (a wrong key, model name or dimension setting) must stop the
    worker, not leave every message without a vector.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._pending: list[tuple[str, asyncio.Future]] = []
        self._flushing: set[asyncio.Task] = set()  # held, so a running flush is never garbage-collected

    def _start_flush(self) -> None:
        task = asyncio.ensure_future(self._flush())
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def embed(self, text: str) -> list[float] | None:
        """The text's vector, or None when the model refuses this text for good."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self._pending:
            # scheduled behind the tasks already runnable, so their texts join this call
            loop.call_soon(self._start_flush)
        self._pending.append((text, future))
        return await future

    async def _flush(self) -> None:
        batch, self._pending = self._pending, []
        try:
            vectors = await vectors_or_none(self.embedder, [text for text, _ in batch])
        except Exception as exc:  # every waiter fails, so its transaction aborts
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), vector in zip(batch, vectors, strict=True):
            if not future.done():
                future.set_result(vector)


class EmbedderProcessor:
    name = "embedder"
    inputs = (SESSIONS,)
    max_batch = 500

    def __init__(self, embedder: Embedder) -> None:
        self.model_name = embedder.model_name
        self.coalescer = Coalescer(embedder)
        self.producer = ProducerInfo(component="embedder", version="0.2.0", model=embedder.model_name)

    async def handle(self, get: Get, event: Event) -> Step:
        previous = get(event.key)
        text = text_to_embed(event, previous)
        if text is None:
            state = after(event, previous)
            return Step() if state is previous else Step([], {event.key: state})
        assert isinstance(event, MessageAppended)
        try:
            vector = await self.coalescer.embed(text)
        except (ModelError, EmbeddingError) as error:
            # the model failed every text (an outage, a wrong key or size): the batch is embedded again from the
            # committed offsets by this processor alone. Raised as it was, it ended the worker and every
            # processor in it, the router and deriver too
            raise TransactionFailed(f"the embedding model failed: {error}") from error
        if vector is None:
            # full-text search still finds it; `peerlog reembed` with this model fills the vector in once it is taken
            log.error(
                "message %s of session %s in workspace %s goes without a vector: the embedding model refuses its text",
                event.message_id,
                event.session_id,
                event.workspace_id,
            )
            return Step([], {event.key: after(event, previous)})
        return Step([embedded(event, vector, self.model_name, self.producer)], {event.key: after(event, previous)})


def build(settings: Settings):
    return EmbedderProcessor(make_embedder(settings.embedding)), None
