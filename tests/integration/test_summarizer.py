"""Sessions get rolling short and long summaries at the configured cadence, within their word limits."""

from __future__ import annotations

import asyncio

from sqlalchemy import select

from projections.db import sync_engine
from projections.schema import dead_letters, summaries
from services.cli.client import Client
from tests.support.model_server import Reply
from tests.support.wait import eventually


def summary_rows(settings):
    engine = sync_engine(settings.database)
    try:
        with engine.connect() as conn:
            return conn.execute(select(summaries).order_by(summaries.c.last_seq, summaries.c.kind)).mappings().all()
    finally:
        engine.dispose()


def summarizer_calls(model_server):
    return [r for r in model_server.chat_requests() if "rolling" in r["messages"][0]["content"]]


async def test_short_and_long_summaries_come_at_their_cadence_and_build_on_the_previous_one(
    channel, settings, model_server, start_worker
):
    model_server.reply_with(
        lambda req: Reply(content=f"summary {len(summarizer_calls(model_server))} " + "word " * 500)
    )
    start_worker("summarizer", PEERLOG_SUMMARIZER_SHORT_EVERY="4", PEERLOG_SUMMARIZER_LONG_EVERY="8")
    c = Client(channel)
    await c.setup_conversation("w", "s")
    for i in range(9):
        await c.add("w", "s", [("alice" if i % 2 == 0 else "bob", f"turn {i} about the garden")])

    eventually(lambda: len(summary_rows(settings)) >= 3, 60)
    await asyncio.sleep(1)
    rows = summary_rows(settings)
    assert [(r["kind"], r["last_seq"], r["messages_covered"]) for r in rows] == [
        ("short", 4, 4),
        ("long", 8, 8),
        ("short", 8, 4),
    ]
    for r in rows:
        assert len(r["content"].split()) <= (3000 if r["kind"] == "long" else 0.75 * 1000)
    second_short = [r for r in summarizer_calls(model_server) if "short" in r["messages"][0]["content"]][1]
    assert rows[0]["content"] in second_short["messages"][1]["content"]  # built on the previous short one
    short = rows[0]
    assert len(short["content"].split()) <= int(0.75 * 28)  # 0.75 × the input tokens of four short turns


async def test_a_failing_model_never_stores_a_placeholder_summary(channel, settings, model_server, start_worker):
    model_server.reply_with(lambda req: Reply(status=500))
    start_worker("summarizer", PEERLOG_SUMMARIZER_SHORT_EVERY="2")
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.add("w", "s", [("alice", "one"), ("bob", "two")])
    dead = eventually(lambda: [d for d in _dead(settings) if d["kind"] == "summary"], 60)
    assert dead and summary_rows(settings) == []


def _dead(settings):
    engine = sync_engine(settings.database)
    try:
        with engine.connect() as conn:
            return conn.execute(select(dead_letters)).mappings().all()
    finally:
        engine.dispose()


async def test_messages_dropped_unsummarised_stay_in_the_status_after_a_later_summary(
    channel, settings, model_server, start_worker
):
    model_server.reply_with(lambda request: Reply(status=500))
    start_worker("summarizer")
    c = Client(channel)
    await c.setup_conversation("w", "s")
    for batch in range(3):  # ~1.2 MB while the model fails: more than the pending state keeps
        await c.add("w", "s", [("alice", f"turn {batch}-{i} " + "x" * 3990) for i in range(100)])
    eventually(lambda: [d for d in _dead(settings) if d["summary_dropped"]], 120)

    model_server.reply_with(lambda request: Reply(content="they talked at length"))
    await c.add("w", "s", [("bob", f"short turn {i}") for i in range(25)])
    eventually(lambda: [r for r in summary_rows(settings) if r["kind"] == "short"], 120)
    status = await c.processing_status("w", session_id="s")
    # a later summary covers none of the dropped messages: their dead letters are still what the status says
    shown = {d.error for d in status.dead_lettered_summaries}
    dropped = {d["error"] for d in _dead(settings) if d["summary_dropped"]}
    assert dropped and dropped <= shown and all("fell out of the pending" in e for e in dropped)
