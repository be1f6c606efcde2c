"""Issue 17 §2.7: a model that fails for long does not grow the summarizer's state past the broker's record
limit (where the runner used to retry the same batch for ever); what falls out is dead-lettered."""

from __future__ import annotations

from services.cli.client import Client
from tests.integration.test_summarizer import _dead, summary_rows
from tests.support.model_server import Reply
from tests.support.wait import eventually


async def test_a_long_model_outage_dead_letters_the_oldest_messages_and_summaries_resume_after_it(
    channel, settings, model_server, start_worker
):
    model_server.reply_with(lambda request: Reply(status=500))
    start_worker("summarizer")
    c = Client(channel)
    await c.setup_conversation("w", "s")
    for batch in range(3):  # 1.2 MB of text, pending for both kinds: over the 1 MiB record limit unbounded
        await c.add("w", "s", [("alice", f"turn {batch}-{i} " + "x" * 3990) for i in range(100)])

    fell_out = eventually(lambda: [d for d in _dead(settings) if "fell out" in d["error"]], 120)
    assert {d["kind"] for d in fell_out} <= {"summary"} and fell_out[0]["attempts"] >= 1

    model_server.reply_with(lambda request: Reply(content="they talked at length"))
    await c.add("w", "s", [("bob", f"short turn {i}") for i in range(25)])
    rows = eventually(lambda: summary_rows(settings), 120)  # the summarizer kept going
    assert rows[0]["content"] == "they talked at length"
