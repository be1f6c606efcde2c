"""A deriver batch of several windows (one model call each) is dated when it lands, not window by window: a
client's observation written while a later window's model call runs is no later than the batch's."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from services.cli.client import Client
from services.events.base import utcnow
from tests.support.extractor import extract_each_turn, target_turns
from tests.support.model_server import Reply
from tests.support.wait import until, until_true

SMALL = "I adopted a cat named Miso last spring and she sleeps on my desk all day long now"
BIG = "I work night shifts as a nurse at the hospital " * 12  # past the window cap: a window of its own
WRITTEN = ["Alice keeps a journal", "Alice runs on Sundays"]
HELD_S = 120  # the second window's reply waits until the client has written and read, at most this


@dataclass
class Meanwhile:
    """What a client did while the batch's second model call ran, and the store once the batch landed."""

    client: Client
    cursor: str  # the page token after the client's first observation, read before the batch landed
    as_of: Timestamp  # a time after the client's write and before the batch landed
    seen_as_of: list[str]  # the store as of `as_of`, read then


async def _write_during_a_slow_batch(channel, model_server, start_worker) -> Meanwhile:
    """Two windows in one batch, the second's model call slow; a client writes and reads in between."""
    asked_big, release = [], threading.Event()

    def slow_on_big(request):
        if any(BIG[:40] in text for _, text in target_turns(request)):
            asked_big.append(True)  # the first window is judged by now
            release.wait(HELD_S)  # held until the client's reads are done: no delay to outlast them
            return Reply(content=extract_each_turn(request).content)
        return extract_each_turn(request)

    model_server.reply_with(slow_on_big)
    start_worker(
        "router,deriver",
        PEERLOG_DERIVER_FLUSH="false",
        PEERLOG_DERIVER_BATCH_TOKENS="60",
        PEERLOG_DERIVER_WINDOW_TOKENS="64",
        PEERLOG_LLM_TIMEOUT_S=str(HELD_S + 30),
    )
    c = Client(channel)
    await c.setup_conversation("w", "s1", peers=("alice",))
    await c.add("w", "s1", [("alice", SMALL)])
    await c.add("w", "s1", [("alice", BIG)])
    await until_true(lambda: asked_big, timeout=60)
    made = await c.create_observations("w", "alice", "alice", WRITTEN)
    first = await c.list_observations("w", "alice", "alice", token=made.consistency_token, page_size=1)
    as_of = Timestamp()
    as_of.FromDatetime(utcnow())
    seen = await c.list_observations("w", "alice", "alice", as_of=as_of)
    landed = await c.all_observations("w", "alice", "alice")
    # read before the batch landed, or neither read says anything about it
    release.set()
    assert [o.content for o in landed] == WRITTEN, "the batch landed before the client's reads"
    await until(lambda: c.all_observations("w", "alice", "alice"), lambda o: len(o) == 4, timeout=60)
    return Meanwhile(c, first.next_page_token, as_of, [o.content for o in seen.observations])


async def test_a_forward_pager_lists_every_observation_of_a_batch_that_landed_after_its_cursor(
    channel, model_server, start_worker
):
    run = await _write_during_a_slow_batch(channel, model_server, start_worker)
    assert run.cursor, "two observations on pages of one: the first page has a next page"
    rest = await _pages_from(run.client, run.cursor)
    assert [o.content for o in rest] == [WRITTEN[1], f"The target said: {SMALL}", f"The target said: {BIG}"]


async def test_an_as_of_read_gives_the_same_answer_after_a_slow_batch_lands(channel, model_server, start_worker):
    run = await _write_during_a_slow_batch(channel, model_server, start_worker)
    again = await run.client.list_observations("w", "alice", "alice", as_of=run.as_of)
    assert run.seen_as_of == WRITTEN
    assert [o.content for o in again.observations] == run.seen_as_of


async def _pages_from(client: Client, token: str) -> list:
    """Every observation a forward pager lists from `token` on, page by page."""
    out = []
    while token:
        page = await client.list_observations("w", "alice", "alice", page_size=1, page_token=token)
        out += page.observations
        token = page.next_page_token
    return out
