"""`peerlog rederive` writes a separate, named derivation from the recorded perceptions; the current one stays."""

from __future__ import annotations

import asyncio

from sqlalchemy import select

from peerlog.v1 import audit_pb2, observations_pb2
from projections.db import sync_engine
from projections.schema import derivation_batches, observations
from services.cli.client import Client
from services.rederivation.rederive import DerivationScope, rederive
from tests.support.extractor import extract_each_turn, with_fact
from tests.support.wait import eventually


def current_rows(settings) -> list[dict]:
    engine = sync_engine(settings.database)
    try:
        with engine.connect() as conn:
            rows = (
                conn.execute(
                    select(observations).where(observations.c.derivation == "").order_by(observations.c.observation_id)
                )
                .mappings()
                .all()
            )
            return [dict(r) for r in rows]
    finally:
        engine.dispose()


def batches_of(settings, derivation: str = "") -> list[dict]:
    """The projected batches of one derivation (stored label: "" is the original)."""
    engine = sync_engine(settings.database)
    try:
        with engine.connect() as conn:
            return [
                dict(r)
                for r in conn.execute(
                    select(derivation_batches)
                    .where(derivation_batches.c.derivation == derivation)
                    .order_by(derivation_batches.c.batch_id)
                ).mappings()
            ]
    finally:
        engine.dispose()


async def test_rederive_builds_a_named_derivation_and_leaves_the_current_one_untouched(
    channel, settings, model_server, start_worker
):
    model_server.reply_with(extract_each_turn)
    start_worker("router,deriver")
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.add(
        "w",
        "s",
        [("alice", "I adopted a cat named Miso"), ("bob", "I run every morning"), ("alice", "Miso sleeps all day")],
    )
    eventually(lambda: len(current_rows(settings)) == 3, 60)
    before, batches = current_rows(settings), batches_of(settings)

    model_server.reply_with(with_fact(lambda text: f"v2: {text.lower()}"))
    here = settings.model_copy(update={"llm": settings.llm.model_copy(update={"base_url": model_server.base_url})})
    report = await rederive(here, "v2", DerivationScope("w"), model="other-model", progress=lambda _: None)
    assert (report.pairs, report.messages) == (2, 3)

    named = await c.observations.ListObservations(
        observations_pb2.ListObservationsRequest(
            workspace_id="w",
            observer_id="alice",
            observed_id="alice",
            derivation="v2",
            consistency={"consistency_token": report.consistency_token},
        )
    )
    assert [o.content for o in named.observations] == ["v2: i adopted a cat named miso", "v2: miso sleeps all day"]
    assert {o.derivation for o in named.observations} == {"v2"}
    history = await c.audit.GetObservationHistory(
        audit_pb2.GetObservationHistoryRequest(workspace_id="w", observation_id=named.observations[0].observation_id)
    )
    assert history.entries[0].producer.model == "other-model"

    await asyncio.sleep(0.5)
    assert current_rows(settings) == before and batches_of(settings) == batches
    current = await c.all_observations("w", "alice", "alice")
    assert [o.content for o in current] == [
        "The target said: I adopted a cat named Miso",
        "The target said: Miso sleeps all day",
    ]
    status = await c.processing_status("w")
    assert status.counts.done == 3 and status.counts.pending == 0


async def test_a_derivation_name_that_is_not_an_id_is_refused(settings):
    try:
        await rederive(settings, "no spaces", DerivationScope("w"))
    except ValueError as error:
        assert "must match" in str(error)
    else:
        raise AssertionError("an invalid name was accepted")
