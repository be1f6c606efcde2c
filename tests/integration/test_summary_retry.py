"""Issue 17 §2.9: `peerlog derivations retry` retries dead-lettered summaries too, through the log."""

from __future__ import annotations

import asyncio
import os
import sys

from services.cli.client import Client
from tests.integration.test_summarizer import summary_rows
from tests.support.model_server import Reply
from tests.support.processes import settings_env
from tests.support.wait import until


async def peerlog(settings, *args: str) -> str:
    """Run the peerlog command line against this test's topics and schema; its output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        *args,
        env={**os.environ, **settings_env(settings)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, out.decode()
    return out.decode()


async def test_derivations_retry_has_the_summarizer_write_a_dead_lettered_summary_once_the_model_works(
    channel, settings, model_server, start_worker
):
    model_server.reply_with(lambda request: Reply(status=500))
    start_worker("summarizer", PEERLOG_SUMMARIZER_SHORT_EVERY="2")
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.add("w", "s", [("alice", "hello"), ("bob", "hi there")])
    await until(lambda: c.processing_status("w"), lambda s: len(s.dead_lettered_summaries) == 1, timeout=90)

    model_server.reply_with(lambda request: Reply(content="greetings"))
    out = await peerlog(settings, "derivations", "retry", "-w", "w")
    assert "summaries: 1 sessions asked to try again" in out, out
    token = out.rsplit("consistency token ", 1)[1].strip()
    await until(lambda: c.processing_status("w", token=token), lambda s: not s.dead_lettered_summaries, timeout=90)
    assert [(r["kind"], r["content"]) for r in summary_rows(settings)] == [("short", "greetings")]

    again = await peerlog(settings, "derivations", "retry", "-w", "w")
    assert "summaries: 0 sessions" in again  # nothing left to retry, so nothing is asked twice
