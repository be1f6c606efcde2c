"""Calls waiting on the projector share one read of its positions (services/api/projected.py): many reads
holding one consistency token cost one query per interval between them, not one per reader, and a
token already projected costs none."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy.dialects.postgresql import insert

from projections.db import async_engine, create_schema, sync_engine
from projections.schema import projection_offsets
from services.api.freshness import Freshness
from services.api.projected import ProjectedPositions
from services.bus.consistency import ConsistencyToken
from services.errors import Unavailable

TOPIC, INTERVAL_S = "t.sessions", 0.01


@pytest.fixture
def admin(settings):
    engine = sync_engine(settings.database)
    create_schema(engine, settings.database.schema_name)
    yield engine
    engine.dispose()


@pytest.fixture
async def projected(settings, admin):
    engine = async_engine(settings.database)
    yield ProjectedPositions(engine, INTERVAL_S)
    await engine.dispose()


def project_up_to(admin, next_offset: int) -> None:
    stmt = insert(projection_offsets).values(topic=TOPIC, partition=0, next_offset=next_offset)
    with admin.begin() as conn:
        conn.execute(
            stmt.on_conflict_do_update(index_elements=["topic", "partition"], set_={"next_offset": next_offset})
        )


def token(offset: int) -> ConsistencyToken:
    return ConsistencyToken({(TOPIC, 0): offset})


async def test_fifty_reads_waiting_on_one_token_share_the_projector_positions_query(admin, projected):
    project_up_to(admin, 5)
    freshness = Freshness(projected, timeout_s=10)
    started = time.monotonic()
    readers = [asyncio.create_task(freshness.wait(token(10))) for _ in range(50)]
    await asyncio.sleep(0.3)
    assert not any(r.done() for r in readers), "offset 10 is not projected yet"
    project_up_to(admin, 11)
    await asyncio.wait_for(asyncio.gather(*readers), 2)
    elapsed = time.monotonic() - started
    assert projected.refreshes <= elapsed / INTERVAL_S + 2, "at most one query per interval, whatever the readers"
    assert projected.refreshes < 50


async def test_a_token_already_seen_projected_is_answered_without_a_query(admin, projected):
    project_up_to(admin, 100)
    freshness = Freshness(projected, timeout_s=10)
    await freshness.wait(token(99))
    queried = projected.refreshes
    await asyncio.gather(*(freshness.wait(token(offset)) for offset in range(100)))
    assert projected.refreshes == queried


async def test_a_token_never_projected_fails_as_unavailable_after_the_wait(admin, projected):
    project_up_to(admin, 5)
    started = time.monotonic()
    with pytest.raises(Unavailable, match="have not caught up"):
        await Freshness(projected, timeout_s=0.5).wait(token(10))
    assert time.monotonic() - started >= 0.5
