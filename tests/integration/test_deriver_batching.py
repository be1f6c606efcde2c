"""When the deriver calls the model: by token target, by age, and exactly once across a worker crash."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from services.bus.topics import OBSERVATIONS
from services.cli.client import Client
from services.events import BatchDerived, ObservationAdded
from services.llm.tokens import count_tokens
from tests.support.extractor import extract_each_turn, is_deriver, target_turns
from tests.support.log import read_events
from tests.support.model_server import Reply
from tests.support.wait import eventually


def deriver_calls(model_server) -> list[dict]:
    return [r for r in model_server.chat_requests() if is_deriver(r)]


def turns_of(call) -> list[str]:
    return [text for _, text in target_turns(call)]


async def test_a_pair_is_derived_once_its_pending_messages_reach_the_token_target(channel, model_server, start_worker):
    model_server.reply_with(extract_each_turn)
    lines = ["I grow tomatoes on my balcony", "I also keep two beehives there", "honey season starts in June"]
    target = sum(count_tokens(t) for t in lines)
    start_worker(PEERLOG_DERIVER_FLUSH="false", PEERLOG_DERIVER_BATCH_TOKENS=str(target))
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    for line in lines[:2]:
        await c.add("w", "s", [("alice", line)])
    await asyncio.sleep(4)
    assert deriver_calls(model_server) == []  # below the target: still waiting

    await c.add("w", "s", [("alice", lines[2])])
    calls = eventually(lambda: deriver_calls(model_server), 30)
    await asyncio.sleep(1)
    assert len(deriver_calls(model_server)) == 1
    assert turns_of(calls[0]) == lines  # one call over the whole batch, in order


async def test_a_quiet_pair_is_derived_once_its_oldest_message_has_waited_long_enough(
    channel, model_server, start_worker
):
    model_server.reply_with(extract_each_turn)
    start_worker(
        PEERLOG_DERIVER_FLUSH="false",
        PEERLOG_DERIVER_BATCH_TOKENS="100000",
        PEERLOG_DERIVER_MAX_WAIT_S="3",
        PEERLOG_DERIVER_TICK_S="0.5",
    )
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    sent_at = time.monotonic()
    await c.add("w", "s", [("alice", "I am learning the cello")])
    calls = eventually(lambda: deriver_calls(model_server), 40)
    waited = time.monotonic() - sent_at
    assert turns_of(calls[0]) == ["I am learning the cello"]
    assert waited >= 3, f"derived after {waited:.1f} s, before the age limit"


async def test_a_backlog_behind_slow_model_calls_is_derived_in_full_batches(channel, model_server, start_worker):
    def slow_extract(request):
        return Reply(content=extract_each_turn(request).content, delay_s=1.0)

    model_server.reply_with(slow_extract)
    lines = [
        f"my {colour} notebook is on the shelf"
        for colour in (
            "red",
            "blue",
            "green",
            "black",
            "white",
            "brown",
            "pink",
            "grey",
            "gold",
            "silver",
            "orange",
            "purple",
        )
    ]
    # three lines fill a batch; the age limit passes while the first two batches are at the model, so the
    # rest wait longer than it on the wall clock (each was derived alone before the fix)
    start_worker(
        PEERLOG_DERIVER_FLUSH="false",
        PEERLOG_DERIVER_BATCH_TOKENS=str(3 * count_tokens(lines[0])),
        PEERLOG_DERIVER_MAX_WAIT_S="1.5",
        PEERLOG_DERIVER_TICK_S="0.5",
    )
    assert {count_tokens(line) for line in lines} == {count_tokens(lines[0])}
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    await c.add("w", "s", [("alice", line) for line in lines])
    eventually(lambda: sum(len(turns_of(r)) for r in deriver_calls(model_server)) >= len(lines), 60)
    await asyncio.sleep(1)
    assert [turns_of(r) for r in deriver_calls(model_server)] == [lines[i : i + 3] for i in range(0, 12, 3)]


async def test_a_worker_killed_mid_batch_derives_every_message_exactly_once(
    channel, settings, model_server, start_worker
):
    def slow_extract(request):
        reply = extract_each_turn(request)
        return Reply(content=reply.content, delay_s=2.0)

    model_server.reply_with(slow_extract)
    worker = start_worker()
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    facts = [
        "I was born in Porto",
        "I work as a nurse",
        "my sister plays chess",
        "I am allergic to peanuts",
        "I drive an old Volvo",
        "we adopted a parrot",
    ]
    sent = []
    for fact in facts:
        sent += (await c.add("w", "s", [("alice", fact)])).message_ids
    eventually(lambda: deriver_calls(model_server), 60)  # a model call is in flight
    await asyncio.sleep(0.5)
    worker.kill()
    start_worker()

    def complete(events):
        covered = [m for e in events if isinstance(e, BatchDerived) for m in e.message_ids]
        return set(covered) >= set(sent)

    events = read_events(settings, OBSERVATIONS, complete, timeout=120, settle=3.0)
    covered = Counter(m for e in events if isinstance(e, BatchDerived) for m in e.message_ids)
    assert covered == Counter(sent), "every message derived exactly once on the committed log"
    added = Counter(e.content for e in events if isinstance(e, ObservationAdded))
    assert sorted(added.values()) == [1] * 6
    assert len(deriver_calls(model_server)) > 6  # the killed worker's in-flight call was redone
