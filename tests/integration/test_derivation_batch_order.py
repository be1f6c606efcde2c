"""A derivation batch's row is the same in whatever order its events are read: its start and result come
from the pair's observations topic, its dead letter from another topic, and neither a projector catching
up nor a rebuild reads topics in a fixed order among themselves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import permutations

import pytest
from sqlalchemy import select

from projections.db import create_schema, sync_engine
from projections.memory_handlers import MEMORY_HANDLERS
from projections.schema import derivation_batches
from services.events import BatchDerived, DerivationDeadLettered, DerivationStarted, ProducerInfo

T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
PRODUCER = ProducerInfo(component="deriver", version="test", model="m", prompt_version="1")


def _story(workspace: str) -> dict[str, object]:
    """A batch the model failed on (dead-lettered), later derived by `peerlog derivations retry`."""
    pair = dict(workspace_id=workspace, observer_id="alice", observed_id="alice", batch_id="b1", message_ids=("m1",))
    return {
        "started": DerivationStarted(producer=PRODUCER, occurred_at=T0, **pair),
        "dead_lettered": DerivationDeadLettered(
            producer=PRODUCER, occurred_at=T0 + timedelta(seconds=5), error="not JSON", attempts=4, **pair
        ),
        "derived": BatchDerived(
            producer=PRODUCER,
            occurred_at=T0 + timedelta(minutes=5),
            added=1,
            reinforced=0,
            superseded=0,
            rejected=0,
            model="m",
            prompt_version="1",
            **pair,
        ),
    }


@pytest.fixture
def engine(settings):
    schema = "batch_order"
    engine = sync_engine(settings.database, schema)
    create_schema(engine, schema)
    yield engine
    engine.dispose()


def _row(engine, workspace: str) -> dict:
    with engine.connect() as conn:
        row = conn.execute(select(derivation_batches).where(derivation_batches.c.workspace_id == workspace)).one()
    return {k: v for k, v in row._mapping.items() if k != "workspace_id"}


def test_a_retried_batch_reads_done_with_its_start_whatever_order_its_events_arrive_in(engine):
    rows = {}
    for i, order in enumerate(permutations(("started", "dead_lettered", "derived"))):
        workspace = f"order-{i}"
        story = _story(workspace)
        for name in order:  # each event in its own transaction, as separate projector batches would be
            with engine.begin() as conn:
                MEMORY_HANDLERS[type(story[name])](conn, [story[name]])
        rows[order] = _row(engine, workspace)
    as_lived = rows[("started", "dead_lettered", "derived")]
    assert (as_lived["state"], as_lived["started_at"], as_lived["error"]) == ("done", T0, None)
    assert as_lived["finished_at"] == T0 + timedelta(minutes=5) and as_lived["added"] == 1
    assert {order: row for order, row in rows.items() if row != as_lived} == {}


def test_a_batch_dead_lettered_twice_keeps_the_last_error_and_its_first_start(engine):
    story = _story("twice")
    again = story["dead_lettered"].model_copy(update={"occurred_at": T0 + timedelta(minutes=1), "error": "timeout"})
    for event in (story["dead_lettered"], story["started"], again):
        with engine.begin() as conn:
            MEMORY_HANDLERS[type(event)](conn, [event])
    row = _row(engine, "twice")
    assert (row["state"], row["error"], row["started_at"]) == ("dead_lettered", "timeout", T0)
