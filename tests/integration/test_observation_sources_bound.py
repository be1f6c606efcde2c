"""Reads of an observation fetch only the sources they show: the deriver adds one at each reinforcement, and a
fact reinforced 40,000 times took GetObservation a second (40,001 rows fetched to show 100) and its history
a minute to page through."""

from __future__ import annotations

from sqlalchemy import insert, select

from peerlog.v1 import audit_pb2
from peerlog.v1 import observations_pb2 as o
from projections.db import sync_engine
from projections.schema import observation_events, observation_sources
from services.api.observation_reads import MAX_SOURCES_SHOWN
from services.cli.client import Client
from tests.support.sql_rows import rows_read

SOURCE_COLUMNS = {"span", "ordinal"}  # a statement reading observation_sources rows


async def observation_reinforced(c: Client, settings, content: str, times: int) -> str:
    """Alice's observation about bob, then the rows `times` reinforcements by the deriver would have projected
    (one source and one history entry each): written straight to the tables, as thousands of events through
    the log would take minutes."""
    sent = await c.add("w", "s", [("bob", content)])
    (message_id,) = sent.message_ids
    await c.list_messages("w", "s", sent.consistency_token)
    made = await c.create_observations(
        "w",
        "alice",
        "bob",
        [o.NewObservation(content=content, session_id="s", sources=[o.ObservationSource(message_id=message_id)])],
    )
    (observation_id,) = made.observation_ids
    await c.get_observation("w", observation_id, made.consistency_token)
    engine = sync_engine(settings.database)
    try:
        with engine.begin() as conn:
            added = conn.execute(
                observation_events.select().where(observation_events.c.observation_id == observation_id)
            ).mappings()
            (added,) = list(added)
            ids = [f"r-{observation_id}-{i:05d}" for i in range(times)]
            rows = [{"event_id": e, "ordinal": 0, "workspace_id": "w", "observation_id": observation_id} for e in ids]
            sources = [{**r, "message_id": message_id, "span": f"again {i}"} for i, r in enumerate(rows)]
            conn.execute(insert(observation_sources), sources)
            conn.execute(insert(observation_events), [{**added, "event_id": e, "kind": "reinforced"} for e in ids])
    finally:
        engine.dispose()
    return observation_id


def first_spans(settings, observation_id: str, n: int) -> list[str]:
    """The observation's first `n` source spans in the order sources have always been shown in."""
    t = observation_sources.c
    engine = sync_engine(settings.database)
    try:
        with engine.connect() as conn:
            stmt = select(t.span).where(t.observation_id == observation_id).order_by(t.event_id, t.ordinal).limit(n)
            return list(conn.execute(stmt).scalars())
    finally:
        engine.dispose()


async def history_page_costs(c: Client, observation_id: str, limit: int) -> tuple[list[int], int]:
    """Source rows fetched by each page of the observation's history, and the entries read in all."""
    costs, entries, token = [], 0, ""
    while True:
        with rows_read(SOURCE_COLUMNS) as fetched:
            page = await c.audit.GetObservationHistory(
                audit_pb2.GetObservationHistoryRequest(
                    workspace_id="w", observation_id=observation_id, limit=limit, page_token=token
                )
            )
        costs.append(sum(fetched))
        entries += len(page.entries)
        token = page.next_page_token
        if not token:
            return costs, entries


async def test_get_observation_reads_only_the_sources_it_shows(channel, settings):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    times = 3 * MAX_SOURCES_SHOWN
    oid = await observation_reinforced(c, settings, "Bob lives in Lisbon", times)
    shown = first_spans(settings, oid, MAX_SOURCES_SHOWN)

    with rows_read(SOURCE_COLUMNS) as fetched:
        got = await c.get_observation("w", oid)

    assert got.source_count == times + 1
    assert [s.span for s in got.sources] == shown  # the same first ones as ever
    assert sum(fetched) == MAX_SOURCES_SHOWN


async def test_history_pages_cost_the_same_whatever_the_reinforcement_count(channel, settings):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    few = await observation_reinforced(c, settings, "Bob lives in Lisbon", 3)
    many = await observation_reinforced(c, settings, "Bob works in Porto", 2_000)

    (few_cost,), few_entries = await history_page_costs(c, few, 500)
    many_costs, many_entries = await history_page_costs(c, many, 500)

    assert (few_entries, many_entries) == (4, 2_001)
    assert many_costs == [few_cost] * 5
    with rows_read(SOURCE_COLUMNS) as fetched:  # and the count does see the API's reads of sources
        await c.get_observation("w", many)
    assert sum(fetched) == MAX_SOURCES_SHOWN
