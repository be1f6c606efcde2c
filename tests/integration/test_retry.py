"""`peerlog derivations retry` derives what the live deriver dead-lettered, once; runs exclude each other."""

from __future__ import annotations

import pytest

from peerlog.v1 import observations_pb2
from projections.run_lock import RunInProgress, exclusive
from services.cli.client import Client
from services.rederivation.promote import promote
from services.rederivation.rederive import DerivationScope, rederive
from services.rederivation.retry import retry
from tests.integration.test_rederive import current_rows
from tests.support.extractor import extract_each_turn, with_fact
from tests.support.model_server import Reply
from tests.support.wait import until


async def test_a_dead_lettered_batch_is_derived_by_retry_once_the_model_works_and_leaves_the_status(
    channel, settings, model_server, start_worker
):
    model_server.reply_with(lambda request: Reply(content="this is not JSON at all"))
    start_worker("router,deriver")
    here = settings.model_copy(update={"llm": settings.llm.model_copy(update={"base_url": model_server.base_url})})
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    await c.add("w", "s", [("alice", "I live in Oslo")])
    parked = await until(lambda: c.processing_status("w"), lambda s: s.counts.dead_lettered == 1, timeout=60)
    assert len(parked.dead_lettered_batches) == 1 and not current_rows(settings)

    model_server.reply_with(extract_each_turn)  # the cause is fixed
    [report] = await retry(here, DerivationScope("w"), progress=lambda _: None)
    assert (report.name, report.messages, report.batches) == ("original", 1, 1)
    status = await until(lambda: c.processing_status("w", token=report.consistency_token), lambda s: s.counts.done == 1)
    assert status.counts.dead_lettered == 0 and not status.dead_lettered_batches
    assert [r["content"] for r in current_rows(settings)] == ["The target said: I live in Oslo"]

    [again] = await retry(here, DerivationScope("w"), progress=lambda _: None)
    assert (again.messages, again.skipped) == (0, 1)  # nothing is derived twice
    assert len(current_rows(settings)) == 1


async def test_a_second_derivation_run_on_a_workspace_is_refused_while_one_holds_it(settings, model_server):
    here = settings.model_copy(update={"llm": settings.llm.model_copy(update={"base_url": model_server.base_url})})
    async with exclusive(here, "w"):
        for run in (
            rederive(here, "v2", DerivationScope("w"), progress=lambda _: None),
            promote(here, "v2", DerivationScope("w", "alice", "alice"), progress=lambda _: None),
            retry(here, DerivationScope("w"), progress=lambda _: None),
        ):
            with pytest.raises(RunInProgress, match="workspace 'w'"):
                await run
        await rederive(here, "v2", DerivationScope("other"), progress=lambda _: None)  # another workspace is free
    await rederive(here, "v2", DerivationScope("w"), progress=lambda _: None)  # and so is this one once released


async def test_a_retried_message_is_evidence_for_a_clients_observation_as_when_derived_live(
    channel, settings, model_server, start_worker
):
    model_ok = {"now": False}
    peanuts = with_fact(lambda text: "alice is allergic to peanuts")
    model_server.reply_with(lambda request: peanuts(request) if model_ok["now"] else Reply(content="not JSON"))
    start_worker("router,deriver")
    c = Client(channel)
    await c.setup_conversation("w", "s")
    new = observations_pb2.NewObservation(content="alice is allergic to peanuts", observation_id="peanuts")
    await c.create_observations("w", "alice", "alice", [new])
    await c.add("w", "s", [("alice", "I am allergic to peanuts")])
    await until(lambda: c.processing_status("w"), lambda s: s.counts.dead_lettered == 1)
    model_ok["now"] = True  # the cause is fixed
    here = settings.model_copy(update={"llm": settings.llm.model_copy(update={"base_url": model_server.base_url})})
    [report] = await retry(here, DerivationScope("w"), progress=lambda _: None)
    now = await c.all_observations("w", "alice", "alice", token=report.consistency_token)
    # the live deriver makes it ("peanuts", 2, 1): the message says the client's fact again
    assert [(o.observation_id, o.times_derived, o.source_count) for o in now] == [("peanuts", 2, 1)]
