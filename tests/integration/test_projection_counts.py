"""The projector's scrape-time gauges count what the projection tables hold."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from projections.db import create_schema, sync_engine
from projections.metrics import ProjectionCounts
from projections.schema import dead_letters, derivation_batches, dreams, perceptions

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _perceived(message_id: str, observed: str = "alice") -> dict:
    return dict(
        workspace_id="w",
        observer_id=observed,
        observed_id=observed,
        message_id=message_id,
        session_id="s",
        perceived_at=NOW,
        event_id=f"p-{observed}-{message_id}",
    )


def _batch(batch_id: str, state: str, *message_ids: str) -> dict:
    return dict(
        workspace_id="w",
        batch_id=batch_id,
        observer_id="alice",
        observed_id="alice",
        message_ids=list(message_ids),
        state=state,
    )


def _gauges(engine) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(s.labels.values())): s.value
        for family in ProjectionCounts(engine).collect()
        for s in family.samples
    }


def test_pending_and_in_flight_derivations_dreams_and_dead_letters(settings):
    engine = sync_engine(settings.database)
    try:
        create_schema(engine, settings.database.schema_name)
        assert _gauges(engine)[("peerlog_derivations_pending_messages", ())] == 0
        with engine.begin() as conn:
            conn.execute(
                perceptions.insert(),
                [_perceived(m) for m in ("m1", "m2", "m3", "m4")] + [_perceived("m1", observed="bob")],
            )  # bob's (bob, bob) has no batch: pending
            conn.execute(
                derivation_batches.insert(),
                [
                    _batch("b1", "done", "m1"),
                    _batch("b2", "in_flight", "m2"),
                    _batch("b3", "dead_lettered", "m3"),
                    # parked, then derived by a retry in a batch of other messages too: parked no more
                    _batch("b4", "dead_lettered", "m4"),
                    _batch("b5", "done", "m4", "m5"),
                ],
            )
            conn.execute(
                dreams.insert(),
                [
                    dict(
                        workspace_id="w",
                        dream_id=f"d{i}",
                        observer_id="alice",
                        observed_id="alice",
                        reason="threshold",
                        new_explicit=50,
                        state=state,
                        requested_at=NOW,
                    )
                    for i, state in enumerate(("completed", "completed", "failed"))
                ],
            )
            conn.execute(
                dead_letters.insert(),
                [
                    dict(
                        event_id="x",
                        workspace_id="w",
                        kind="summary",
                        session_id="s",
                        message_ids=["m9"],
                        error="boom",
                        attempts=3,
                        failed_at=NOW,
                    )
                ],
            )
        gauges = _gauges(engine)
    finally:
        engine.dispose()
    assert gauges[("peerlog_derivations_pending_messages", ())] == 1  # bob's m1
    assert [gauges[("peerlog_derivation_batches", (state,))] for state in ("in_flight", "done", "dead_lettered")] == [
        1,
        2,
        1,
    ]
    assert [gauges[("peerlog_dreams", (state,))] for state in ("requested", "started", "completed", "failed")] == [
        0,
        0,
        2,
        1,
    ]
    assert (
        gauges[("peerlog_dead_letters", ("summary",))] == 1 and gauges[("peerlog_dead_letters", ("derivation",))] == 0
    )


def test_the_pending_derivations_count_stays_fast_for_a_pair_with_a_long_history(settings):
    # 16,000 perceptions of one pair, all but the last 5 derived in batches of 10. Matched by `= any(message_ids)`,
    # each perception was compared with each batch of the pair: 2.3 to 9 s, on a loaded machine 0.1 s since
    perceived, per_batch = 16_000, 10
    ids = [f"m{i}" for i in range(perceived)]
    derived = ids[:-5]
    engine, schema = sync_engine(settings.database), settings.database.schema_name
    try:
        create_schema(engine, schema)
        with engine.begin() as conn:
            conn.execute(perceptions.insert(), [_perceived(m) for m in ids])
            conn.execute(
                derivation_batches.insert(),
                [_batch(f"b{i}", "done", *derived[i : i + per_batch]) for i in range(0, len(derived), per_batch)],
            )
        with engine.begin() as conn:  # the statistics autovacuum gathers on a live projection
            conn.exec_driver_sql(f'ANALYZE "{schema}".perceptions, "{schema}".derivation_batches')
        started = time.perf_counter()
        gauges = _gauges(engine)
        took = time.perf_counter() - started
    finally:
        engine.dispose()
    assert gauges[("peerlog_derivations_pending_messages", ())] == 5
    assert took < 1.0, f"a scrape took {took:.2f} s"


def test_the_outstanding_batches_count_stays_fast_for_a_pair_with_many_dead_lettered_batches(settings):
    # one pair's 32,000 messages in batches of 10: the first 800 parked while the model was away and derived since
    # by a retry, in batches of its own; the last 3 still parked. Checked batch by batch against each finished batch
    # of the pair, the count took 4 to 16 s a scrape; 0.05 s on a loaded machine since
    messages, per_batch, retried, parked = 32_000, 10, 800, 3
    chunks = [[f"m{i}" for i in range(n, n + per_batch)] for n in range(0, messages, per_batch)]
    states = ["dead_lettered"] * retried + ["done"] * (len(chunks) - retried - parked) + ["dead_lettered"] * parked
    batches = [_batch(f"b{i}", state, *chunk) for i, (state, chunk) in enumerate(zip(states, chunks, strict=True))]
    retries = [_batch(f"r{i}", "done", *chunk) for i, chunk in enumerate(chunks[:retried])]
    engine, schema = sync_engine(settings.database), settings.database.schema_name
    try:
        create_schema(engine, schema)
        with engine.begin() as conn:
            conn.execute(derivation_batches.insert(), batches + retries)
        with engine.begin() as conn:  # the statistics autovacuum gathers on a live projection
            conn.exec_driver_sql(f'ANALYZE "{schema}".derivation_batches')
        started = time.perf_counter()
        gauges = _gauges(engine)
        took = time.perf_counter() - started
    finally:
        engine.dispose()
    assert [gauges[("peerlog_derivation_batches", (state,))] for state in ("done", "dead_lettered")] == [
        len(chunks) - parked,
        parked,
    ]
    assert took < 1.0, f"a scrape took {took:.2f} s"
