"""The dream scheduler, running as a worker: threshold, idle wait, postponement, cooldown, de-duplication,
the timer re-check and a restart in the middle of a wait. No dreamer runs here: requests stay outstanding
unless the test ends them, as the dreamer would, with a DreamCompleted event."""

from __future__ import annotations

import time
from datetime import timedelta

import grpc
import orjson
from sqlalchemy import select

from peerlog.v1 import configuration_pb2 as cfg
from peerlog.v1 import configuration_pb2_grpc, dreams_pb2
from projections.db import sync_engine
from projections.schema import dreams, perceptions
from services.bus.producer import EventLog
from services.bus.runner import Runner
from services.bus.streams import to_the_end
from services.bus.topics import DREAMS, OBSERVATIONS, TopicSpec
from services.cli.client import Client
from services.dreamer.scheduler_agent import DreamScheduler
from services.events import DreamCompleted, DreamReason, DreamRequested, Event, ProducerInfo, decode
from tests.support.rpc import rejected
from tests.support.wait import eventually

IDLE_S = 3.0
SCHEDULE = {
    "PEERLOG_DREAM_THRESHOLD": "3",
    "PEERLOG_DREAM_IDLE_S": str(IDLE_S),
    "PEERLOG_DREAM_TICK_S": "0.3",
    "PEERLOG_DREAM_COOLDOWN_S": "0",
}


def pair_dreams(settings) -> list[dict]:
    engine = sync_engine(settings.database)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(dreams).order_by(dreams.c.requested_at)).mappings()]
    finally:
        engine.dispose()


def perceived(settings) -> int:
    engine = sync_engine(settings.database)
    try:
        with engine.connect() as conn:
            return len(conn.execute(select(perceptions.c.message_id)).all())
    finally:
        engine.dispose()


def logged(settings, topic: TopicSpec) -> list[Event]:
    """Every committed event on `topic`: the log itself, which the projection may trail."""
    return [decode(m.value()) for m in to_the_end(settings.kafka, topic.full_name(settings.kafka.topic_prefix))]


def requested(settings) -> list[DreamRequested]:
    return [e for e in logged(settings, DREAMS) if isinstance(e, DreamRequested)]


def scheduler_state(settings, pair: str = "w/bob/bob") -> dict:
    """The dream scheduler's committed state for `pair`, from its changelog ({} until it has one)."""
    app_id = settings.worker.app_id_for(settings.kafka.topic_prefix)
    changelog = Runner(settings.kafka, app_id, DreamScheduler).changelog_topic  # the runner names it
    values = [m.value() for m in to_the_end(settings.kafka, changelog) if m.key() == pair.encode()]
    return orjson.loads(values[-1]) if values and values[-1] is not None else {}


def handled_three_facts(settings) -> dict | None:
    """The scheduler's state for (bob, bob) once all three facts are counted, whether or not a dream took them."""
    state = scheduler_state(settings)
    return state if state.get("new_explicit", 0) + state.get("outstanding_explicit", 0) == 3 else None


async def bob_says(c: Client, settings, text: str, expect: int) -> float:
    """Bob speaks; returns when (bob, bob) has perceived it, as a monotonic time."""
    await c.add("w", "s", [("bob", text)])
    eventually(lambda: perceived(settings) >= expect, 30)
    return time.monotonic()


async def three_facts(c: Client) -> None:
    await c.create_observations("w", "bob", "bob", ["Bob keeps bees", "Bob lives in Oslo", "Bob is a nurse"])


async def test_a_dream_waits_for_the_threshold_and_then_for_the_pair_to_be_idle(channel, settings, start_worker):
    start_worker("router,dream-scheduler", **SCHEDULE)
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await bob_says(c, settings, "hello", 1)
    await c.create_observations("w", "bob", "bob", ["Bob keeps bees", "Bob lives in Oslo"])
    time.sleep(IDLE_S + 1)
    assert pair_dreams(settings) == []  # two of three: idle long enough, but not enough to dream about

    spoke = await bob_says(c, settings, "still here", 2)
    await c.create_observations("w", "bob", "bob", ["Bob is a nurse"])
    dream = eventually(lambda: pair_dreams(settings), 30)[0]
    waited = time.monotonic() - spoke
    assert waited >= IDLE_S - 0.5  # the idle wait ran from bob's last message
    assert (dream["observer_id"], dream["observed_id"], dream["reason"], dream["new_explicit"], dream["state"]) == (
        "bob",
        "bob",
        "threshold",
        3,
        "requested",
    )


async def test_a_new_message_postpones_a_waiting_dream(channel, settings, start_worker):
    # a window of its own, wide enough that a message routed and projected slowly still lands inside it
    idle_s, pause_s = 8.0, 1.5
    start_worker("router,dream-scheduler", **{**SCHEDULE, "PEERLOG_DREAM_IDLE_S": str(idle_s)})
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await bob_says(c, settings, "hello", 1)
    await three_facts(c)
    spoke = 0.0
    for i in range(3):  # keep talking inside the idle window: the dream keeps waiting
        time.sleep(pause_s)
        spoke = await bob_says(c, settings, f"and another thing {i}", 2 + i)
        assert pair_dreams(settings) == []
    eventually(lambda: pair_dreams(settings), 30)
    # the window ran again from the last message: far longer than the pause between messages
    assert time.monotonic() - spoke >= idle_s - 2


async def test_forced_dreams_are_deduplicated_while_one_is_outstanding(channel, settings, start_worker):
    start_worker("router,dream-scheduler", **SCHEDULE)
    c = Client(channel)
    await c.setup_conversation("w", "s")
    ask = dreams_pb2.ScheduleDreamRequest(workspace_id="w", observer_id="bob", reason="operator asked")
    await c.dreams.ScheduleDream(ask)
    first = eventually(lambda: pair_dreams(settings), 30)
    await c.dreams.ScheduleDream(ask)
    await three_facts(c)  # the threshold is met too, but one dream is already outstanding
    time.sleep(2)
    assert [d["dream_id"] for d in pair_dreams(settings)] == [first[0]["dream_id"]]
    assert first[0]["reason"] == "forced"

    listed = await c.dreams.ListDreams(dreams_pb2.ListDreamsRequest(workspace_id="w", observer_id="bob"))
    assert [(d.dream_id, d.state) for d in listed.dreams] == [(first[0]["dream_id"], "requested")]


async def dreams_switched(channel, on: bool, session_id: str = "") -> None:
    """Turn dreams on or off at the workspace level (or the session's, given one); returns once readable."""
    levels = configuration_pb2_grpc.ConfigurationServiceStub(channel)
    switch = cfg.Configuration(dreams=on)
    if session_id:
        set_ = levels.SetSessionConfiguration(
            cfg.SetSessionConfigurationRequest(workspace_id="w", session_id=session_id, configuration=switch)
        )
    else:
        set_ = levels.SetWorkspaceConfiguration(
            cfg.SetWorkspaceConfigurationRequest(workspace_id="w", configuration=switch)
        )
    seen = cfg.GetEffectiveConfigurationRequest(workspace_id="w", session_id=session_id)
    seen.consistency.consistency_token = (await set_).consistency_token
    await levels.GetEffectiveConfiguration(seen)


FORCE = dreams_pb2.ScheduleDreamRequest(workspace_id="w", observer_id="bob", reason="operator asked")


async def test_a_dream_forced_where_the_workspace_turned_dreams_off_is_refused(channel):
    # any peer's token may force a dream: past the switch, it ran the model where an operator had turned it off
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await dreams_switched(channel, False)
    await rejected(c.dreams.ScheduleDream(FORCE), grpc.StatusCode.FAILED_PRECONDITION, "dreams are off", "'w'")
    # the scheduler too leaves a forced dream alone where the pair's switch is off (test_dream_schedule.py)


async def test_a_dream_forced_where_a_session_turns_dreams_on_over_a_workspace_off_is_accepted(
    channel, settings, start_worker
):
    # the pair dreams by its latest message's levels, the session's over the workspace's: refused, its dreams
    # ran on their own schedule while no one could force one
    start_worker("router,dream-scheduler", **SCHEDULE)
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await dreams_switched(channel, False)
    await dreams_switched(channel, True, session_id="s")
    await bob_says(c, settings, "hello", 1)
    await c.dreams.ScheduleDream(FORCE)
    assert eventually(lambda: pair_dreams(settings), 30)[0]["reason"] == "forced"


async def test_a_dream_forced_where_the_pairs_latest_message_turned_dreams_off_is_refused(
    channel, settings, start_worker
):
    # the scheduler drops a forced dream where the pair's latest message turned dreams off: accepted, the caller
    # waited for a dream that never came
    start_worker("router,dream-scheduler", **SCHEDULE)
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.session("w", "quiet", members=("alice", "bob"))
    await dreams_switched(channel, False, session_id="quiet")
    await bob_says(c, settings, "hello", 1)
    shh = await c.add("w", "quiet", [("bob", "shh")])  # later, in a session whose dreams are off
    await c.list_messages("w", "quiet", shh.consistency_token)  # the read joins its perception to its row
    eventually(lambda: perceived(settings) >= 2, 30)
    await rejected(
        c.dreams.ScheduleDream(FORCE),
        grpc.StatusCode.FAILED_PRECONDITION,
        "dreams are off for ('bob', 'bob')",
        "session 'quiet'",
        "SetSessionConfiguration",
    )


async def test_after_a_dream_the_cooldown_holds_the_next_until_a_tick_finds_it_over(channel, settings, start_worker):
    start_worker("router,dream-scheduler", **{**SCHEDULE, "PEERLOG_DREAM_COOLDOWN_S": "4", "PEERLOG_DREAM_IDLE_S": "0"})
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await three_facts(c)
    first = eventually(lambda: pair_dreams(settings), 30)[0]
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync(
        [
            DreamCompleted(
                workspace_id="w",
                observer_id="bob",
                observed_id="bob",
                dream_id=first["dream_id"],
                producer=ProducerInfo(component="test", version="0"),
            )
        ]
    )
    log.close()
    ended = time.monotonic()
    await c.create_observations("w", "bob", "bob", ["Bob has a dog", "Bob likes jazz", "Bob runs"])
    time.sleep(1.5)
    assert len(pair_dreams(settings)) == 1  # the threshold is met again, inside the cooldown
    eventually(lambda: len(pair_dreams(settings)) == 2, 30)  # no new event arrives: the timer found it
    assert time.monotonic() - ended >= 4 - 0.5
    assert pair_dreams(settings)[0]["state"] == "completed"


async def test_an_idle_wait_survives_a_worker_restart(channel, settings, start_worker):
    # 15 s: the kill must land inside the idle wait even when a busy machine slows the steps before it
    idle = {**SCHEDULE, "PEERLOG_DREAM_IDLE_S": "15"}
    worker = start_worker("router,dream-scheduler", **idle)
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await bob_says(c, settings, "hello", 1)
    await three_facts(c)
    # waited for, not slept on: a kill before the scheduler had counted them would test no wait at all
    state = eventually(lambda: handled_three_facts(settings), 30)
    assert state["outstanding"] is None  # counted, and waiting out the idle time
    worker.kill()
    assert requested(settings) == []  # read from the log: the projection may not show a dream yet
    start_worker("router,dream-scheduler", **idle)
    dream = eventually(lambda: requested(settings), 60)[0]
    assert (dream.new_explicit, dream.reason) == (3, DreamReason.THRESHOLD)  # the count survived the restart
    last_fact = max(e.occurred_at for e in logged(settings, OBSERVATIONS))
    assert dream.occurred_at - last_fact >= timedelta(seconds=15)  # and so did the wait
