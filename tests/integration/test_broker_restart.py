"""A Kafka broker restart mid-conversation: the pipeline rides through it, losing and doubling nothing."""

from __future__ import annotations

import asyncio
from collections import Counter

import grpc
import pytest

from services.bus.topics import OBSERVATIONS, SESSIONS
from services.cli.client import Client
from services.events import BatchDerived, MessageAppended, ObservationAdded
from tests.integration.test_deriver import deriver_calls
from tests.support.extractor import extract_each_turn
from tests.support.log import read_events
from tests.support.model_server import Reply
from tests.support.wait import eventually, until


@pytest.fixture
def settings(settings):
    """A write refused while the broker is away is refused after 5 s, not the default 30."""
    return settings.model_copy(update={"kafka": settings.kafka.model_copy(update={"append_timeout_s": 5.0})})


async def add_until_accepted(c: Client, text: str, timeout: float = 90) -> list[str]:
    """AddMessages, again while the broker is away (UNAVAILABLE: nothing was written); the ids once accepted."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return list((await c.add("w", "s", [("alice", text)])).message_ids)
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)


async def test_a_broker_restart_mid_derivation_loses_and_doubles_no_message(
    infra, channel, settings, model_server, start_worker
):
    if infra.kafka is None:
        pytest.skip("needs the local broker, which the tests can restart")

    def slow_extract(request):
        return Reply(content=extract_each_turn(request).content, delay_s=1.5)

    model_server.reply_with(slow_extract)
    worker = start_worker("router,deriver")
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    before = ["I was born in Porto", "I work as a nurse", "my sister plays chess"]
    after = ["I am allergic to peanuts", "I drive an old Volvo", "we adopted a parrot"]
    sent = [m for fact in before for m in await add_until_accepted(c, fact)]
    eventually(lambda: deriver_calls(model_server), 60)  # a batch is in flight, inside its transaction
    await asyncio.get_running_loop().run_in_executor(None, infra.kafka.restart)
    sent += [m for fact in after for m in await add_until_accepted(c, fact)]

    def complete(events):
        return set(m for e in events if isinstance(e, BatchDerived) for m in e.message_ids) >= set(sent)

    events = read_events(settings, OBSERVATIONS, complete, timeout=180, settle=3.0)
    covered = Counter(m for e in events if isinstance(e, BatchDerived) for m in e.message_ids)
    assert covered == Counter(sent), "every message derived exactly once on the committed log"
    added = Counter(e.content for e in events if isinstance(e, ObservationAdded))
    assert sorted(added.values()) == [1] * 6
    assert worker.proc.poll() is None, "the worker rode through the restart:\n" + worker.log_text()[-3000:]
    # the projector, too, picks up where it was (its consumer may rejoin its group after the worker's)
    await until(lambda: c.all_observations("w", "alice", "alice"), lambda seen: len(seen) == 6, timeout=120)


async def test_a_write_while_the_broker_is_down_is_refused_whole_and_later_writes_succeed(infra, channel, settings):
    if infra.kafka is None:
        pytest.skip("needs the local broker, which the tests can stop")
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, infra.kafka.stop)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await c.add("w", "s", [("alice", "sent while the log is away")])
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await loop.run_in_executor(None, infra.kafka.start)
    # more writes than the API has producers: the one the failed write used works again too
    after = [f"after the outage {i}" for i in range(4)]
    for text in after:
        await add_until_accepted(c, text)

    def appended(events):
        return [e.content for e in events if isinstance(e, MessageAppended)]

    events = read_events(settings, SESSIONS, lambda got: len(appended(got)) >= len(after), timeout=60, settle=3.0)
    assert appended(events) == after  # the refused write never surfaced, not even after the broker came back
