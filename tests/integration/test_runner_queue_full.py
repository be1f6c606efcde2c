"""A processor's batch with more records than the Kafka client's queue holds is committed whole, once: the
runner waits for room instead of ending (the router's batch in a session of many observers)."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Producer

from services.bus import runner as runner_module
from services.bus.admin import create_topics
from services.bus.producer import EventLog
from services.bus.runner import Runner, Step
from services.bus.topics import DIRECTORY, SESSIONS
from services.events import ProducerInfo, SessionCreated, WorkspaceCreated
from tests.support.log import read_events

P = ProducerInfo(component="test", version="0")
FAN_OUT = 5


class FanOut:
    """Five events out of each session created: what the router does for each observer of a message."""

    name = "fan-out"
    inputs = (SESSIONS,)
    max_batch = 10

    async def handle(self, get, event) -> Step:
        if not isinstance(event, SessionCreated):
            return Step()
        return Step(
            events=[WorkspaceCreated(workspace_id=f"{event.session_id}-{i}", producer=P) for i in range(FAN_OUT)]
        )


@pytest.fixture
def queue_full_at_third_record(monkeypatch):
    """The runner's producer raises BufferError, as librdkafka does with its queue full, at the third record
    of a batch until a poll has let deliveries free room."""
    state = {"produced": 0, "full": False}

    class FullQueue(Producer):
        def produce(self, *args, **kwargs):
            state["produced"] += 1
            if state["produced"] == 3:
                state["full"] = True
            if state["full"]:
                raise BufferError("Local: Queue full")
            return super().produce(*args, **kwargs)

        def poll(self, *args):
            state["full"] = False
            return super().poll(*args)

    monkeypatch.setattr(runner_module, "Producer", FullQueue)
    return state


def test_a_batch_of_more_records_than_the_clients_queue_holds_commits_once_and_the_runner_goes_on(
    settings, queue_full_at_third_record
):
    runner = Runner(settings.kafka, settings.worker.app_id_for(settings.kafka.topic_prefix), FanOut())
    create_topics(settings.kafka, (runner.changelog,))
    log = EventLog(settings.kafka)
    log.start()
    try:
        log.append_sync([SessionCreated(workspace_id="w", session_id="s1", producer=P)])
        alive = asyncio.run(_run_until_written(runner, settings, within_s=60))
    finally:
        log.close()
    assert alive, "the runner ended on a full queue"
    names = [e.workspace_id for e in read_events(settings, DIRECTORY, lambda got: len(got) >= FAN_OUT, settle=3.0)]
    assert sorted(names) == [f"s1-{i}" for i in range(FAN_OUT)]  # each once
    assert queue_full_at_third_record["produced"] > FAN_OUT  # the third record was refused, then taken


async def _run_until_written(runner: Runner, settings, within_s: float) -> bool:
    task = asyncio.create_task(runner.run())
    deadline = time.monotonic() + within_s
    try:
        while runner.processed < 1 and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.05)
        return not task.done()
    finally:
        runner.stop()
        if not task.done() or not task.cancelled():
            await asyncio.gather(task, return_exceptions=True)


def test_a_runner_whose_state_topic_has_fewer_partitions_than_its_inputs_refuses_to_start_saying_why(settings):
    # a worker started with a lower PEERLOG_KAFKA_PARTITIONS than the topics job made the state topic with 2
    # partitions beside inputs of 3: the first input partition past 1 restarted the processor without end
    fewer = settings.kafka.model_copy(update={"partitions": 2})
    runner = Runner(fewer, settings.worker.app_id_for(settings.kafka.topic_prefix), FanOut())
    with pytest.raises(RuntimeError, match=r"state topic .* 2; .*at least as many"):
        asyncio.run(asyncio.wait_for(runner.run(), 60))
