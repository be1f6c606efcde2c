"""A derivation run (rederive, promote, retry) derives each message once even when the projector lags behind
the log or Postgres drops the connection that holds the run's lock."""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy import text

from peerlog.v1 import observations_pb2
from projections.db import sync_engine
from projections.run_lock import LockLost
from services.bus.consistency import ConsistencyToken
from services.bus.topics import OBSERVATIONS
from services.cli.client import Client
from services.events import BatchDerived, MessagePerceived, ProducerInfo, encode
from services.rederivation import rederive as rederive_module
from services.rederivation.rederive import DerivationScope, ProjectorBehind, rederive
from services.rederivation.rederive import perceived as perceived_log
from tests.integration.test_rederive import batches_of
from tests.integration.test_unconfirmed_commits import open_transaction
from tests.support.extractor import target_turns, with_fact
from tests.support.model_server import Reply
from tests.support.wait import until

FACT = "v2: drinks green tea"
FIRST = "I drink green tea with breakfast. " * 8  # about 64 tokens: each message is a batch of its own
SECOND = "Another cup of green tea every day after lunch. " * 6


def settings_for(settings, model_server):
    return settings.model_copy(
        update={
            "llm": settings.llm.model_copy(update={"base_url": model_server.base_url}),
            "deriver": settings.deriver.model_copy(update={"window_tokens": 64}),
        }
    )


async def perceived(channel, turns) -> Client:
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    await c.add("w", "s", [("alice", t) for t in turns])
    await until(lambda: c.processing_status("w"), lambda s: s.counts.pending == len(turns))
    return c


async def v2_observations(c: Client, token: str) -> list[str]:
    reply = await c.observations.ListObservations(
        observations_pb2.ListObservationsRequest(
            workspace_id="w",
            observer_id="alice",
            observed_id="alice",
            derivation="v2",
            consistency={"consistency_token": token},
        )
    )
    return [o.content for o in reply.observations]


def failing_on(words: str):
    """The fact FACT for every target turn, and no JSON at all for a batch holding `words`."""
    fact = with_fact(lambda _: FACT)

    def handler(request):
        if any(words in body for _, body in target_turns(request)):
            return Reply(content="this is not JSON")
        return fact(request)

    return handler


async def test_a_rerun_waits_for_the_projector_so_a_fact_the_run_before_derived_is_not_added_twice(
    channel, settings, projector, model_server, start_worker
):
    start_worker("router")
    c = await perceived(channel, [FIRST, SECOND])
    here, said = settings_for(settings, model_server), []

    projector.stop()  # the first run's batch stays on the log only
    model_server.reply_with(failing_on("every day"))
    first = await rederive(here, "v2", DerivationScope("w"), progress=said.append)
    assert (first.messages, first.parked) == (1, 1)

    model_server.reply_with(failing_on("no batch holds this"))  # the model works again
    asyncio.get_running_loop().call_later(3, projector.start)
    again = await rederive(here, "v2", DerivationScope("w"), progress=said.append)
    assert (again.messages, again.parked) == (1, 0)
    # the second message says the same: its fact is the first one's, reinforced, not a second row
    assert await v2_observations(c, again.consistency_token) == [FACT]
    assert any("waiting for the projector" in line for line in said)


async def test_a_run_behind_a_lagging_projector_waits_for_what_a_client_wrote_and_adds_no_copy_of_it(
    channel, settings, projector, model_server, start_worker
):
    start_worker("router")
    c = await perceived(channel, [FIRST])
    here, said = settings_for(settings, model_server), []
    projector.stop()
    written = await c.create_observations("w", "alice", "alice", [FACT])  # on the log, not yet projected
    model_server.reply_with(with_fact(lambda _: FACT))
    asyncio.get_running_loop().call_later(3, projector.start)
    run = await rederive(here, "v2", DerivationScope("w"), progress=said.append)
    assert run.messages == 1
    token = ConsistencyToken.decode(run.consistency_token).merge(ConsistencyToken.decode(written.consistency_token))
    # the client's fact is in every derivation: the run found it, so v2 reads it once
    assert await v2_observations(c, token.encode()) == [FACT]
    assert any("waiting for the projector" in line for line in said)


async def test_a_run_refuses_to_derive_while_the_projector_stays_behind(
    channel, settings, projector, model_server, start_worker, monkeypatch
):
    start_worker("router")
    await perceived(channel, [FIRST, SECOND])
    here = settings_for(settings, model_server)
    projector.stop()
    model_server.reply_with(failing_on("every day"))
    await rederive(here, "v2", DerivationScope("w"), progress=lambda _: None)

    monkeypatch.setattr(rederive_module, "PROJECTOR_WAIT_S", 1.0)
    calls = len(model_server.requests)
    with pytest.raises(ProjectorBehind, match="nothing more was derived"):
        await rederive(here, "v2", DerivationScope("w"), progress=lambda _: None)
    assert len(model_server.requests) == calls  # no model call, nothing appended
    projector.start()


def run_lock_holders(settings, workspace: str) -> list[int]:
    """The Postgres backends holding the workspace's derivation-run lock."""
    engine = sync_engine(settings.database)
    try:
        with engine.connect() as conn:
            return list(
                conn.execute(
                    text(
                        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                        "AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(:key, 0)"
                    ),
                    {"key": f"peerlog-derivation-run:{workspace}"},
                ).scalars()
            )
    finally:
        engine.dispose()


def terminate(settings, pids: list[int]) -> None:
    engine = sync_engine(settings.database)
    try:
        with engine.connect() as conn:
            for pid in pids:
                conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        engine.dispose()


async def test_a_run_whose_lock_connection_was_dropped_appends_nothing_more_so_each_message_is_derived_once(
    channel, settings, model_server, start_worker
):
    start_worker("router")
    c = await perceived(channel, [FIRST])
    here = settings_for(settings, model_server)
    entered, release, calls = threading.Event(), threading.Event(), []
    fact = with_fact(lambda _: FACT)

    def handler(request):
        calls.append(1)
        if len(calls) == 1:  # the first run's model call: held while its lock's connection is killed
            entered.set()
            release.wait(30)
        return fact(request)

    model_server.reply_with(handler)
    first = asyncio.ensure_future(rederive(here, "v2", DerivationScope("w"), progress=lambda _: None))
    assert await asyncio.to_thread(entered.wait, 30)
    holders = run_lock_holders(settings, "w")
    assert len(holders) == 1
    terminate(settings, holders)  # Postgres drops the session, and the lock with it

    second = await rederive(here, "v2", DerivationScope("w"), progress=lambda _: None)  # it gets in
    assert second.messages == 1
    release.set()
    with pytest.raises(LockLost, match="stopped before appending more"):
        await first
    assert await v2_observations(c, second.consistency_token) == [FACT]
    await asyncio.sleep(1)  # anything the first run appended would be projected by now
    assert len(batches_of(settings, "v2")) == 1 and await v2_observations(c, second.consistency_token) == [FACT]


async def test_a_run_reads_what_is_finished_only_once_a_transaction_open_when_it_began_has_ended(
    channel, settings, model_server, start_worker
):
    """As when a run that lost its lock is still committing a batch while the next run starts."""
    start_worker("router")
    await perceived(channel, [FIRST])
    here = settings_for(settings, model_server)
    history = perceived_log(here, DerivationScope("w")).values()
    [[seen]] = [[e for e in events if isinstance(e, MessagePerceived)] for events in history]
    model_server.reply_with(with_fact(lambda _: FACT))
    batch = BatchDerived(
        producer=ProducerInfo(component="deriver", version="test", model="m", prompt_version="1"),
        workspace_id="w",
        observer_id="alice",
        observed_id="alice",
        derivation="v2",
        batch_id="b-late",
        message_ids=(seen.message_id,),
        added=0,
        reinforced=0,
        superseded=0,
        rejected=0,
        model="m",
        prompt_version="1",
    )
    # the other run's batch of that message, not committed yet
    late, _ = open_transaction(settings, OBSERVATIONS, encode(batch), batch.key.encode())
    threading.Timer(2, late.commit_transaction, args=(30,)).start()  # the run reads the log without a break

    run = await rederive(here, "v2", DerivationScope("w"), progress=lambda _: None)
    assert (run.messages, run.skipped) == (0, 1)  # the other run's batch holds it: not derived again
