"""GetContext's read loop packs its rounds without re-counting the relevant section, off the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

from projections import message_reads
from services.api import context_reads
from services.api.packing import Relevant, fit_fixed
from services.events.text import one_line
from services.llm.tokens import count_tokens


def _short_turns(n: int) -> list[dict]:
    """A session of `n` short turns, newest first, as message_reads.list_messages reads them."""
    return [
        {"seq": s, "message_id": f"m{s}", "peer_id": "bob", "content": f"ok {s}"}
        | {"author_name": "", "origin_message_id": None}
        for s in range(n, 0, -1)
    ]


def _serve(monkeypatch, rows: list[dict]) -> list[int]:
    """Serve `rows` for the read loop; what each read asked for."""
    asked: list[int] = []

    async def list_messages(conn, w, s, older_than, limit, reverse, perspective_id="", as_of=None, turns=False):
        asked.append(limit)
        return [r for r in rows if older_than is None or r["seq"] < older_than][:limit]

    monkeypatch.setattr(message_reads, "list_messages", list_messages)
    return asked


def _heavy_candidates(n: int) -> list[Relevant]:
    """`n` relevant messages of another session, each a long run of line breaks (shown on one line)."""
    at = datetime(2026, 12, 1, tzinfo=UTC)
    return [
        Relevant(f"r{i}", "p", "elsewhere", f"x{i}" + "\r\n" * 2_000 + "y", at + timedelta(minutes=i), 1.0 - i / 1000)
        for i in range(n)
    ]


def test_get_context_counts_each_relevant_candidate_once_per_call(monkeypatch):
    # each read round fitted the relevant section again: 100 candidates of 25,000 characters counted in
    # each of four rounds held the event loop for 6.6 s
    asked = _serve(monkeypatch, _short_turns(12_000))
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return count_tokens(text)

    monkeypatch.setattr(context_reads, "count_tokens", count)
    candidates = _heavy_candidates(100)
    fixed = fit_fixed(context_reads.MAX_BUDGET, [], [], "", "", count_tokens)
    q = context_reads.ContextQuery(workspace_id="w", session_id="s", search_query="x")
    packed = asyncio.run(context_reads._with_recent(None, q, fixed, candidates))
    assert len(asked) >= 3 and packed.relevant and packed.messages  # several rounds, both sections packed
    per_candidate = Counter(t for t in counted for r in candidates if one_line(r.content) in t)
    assert per_candidate and max(per_candidate.values()) == 1
    assert len(per_candidate) <= len(candidates) + 1  # each line once, and the section's last without its break


def test_get_context_lets_the_event_loop_run_while_it_counts_tokens(monkeypatch):
    # the counting ran on the event loop: every RPC of the API process waited for it
    _serve(monkeypatch, _short_turns(50))
    loop_ran = threading.Event()
    waits: list[bool] = []

    def count(text: str) -> int:
        if not waits:  # the first count: it waits for the event loop to run a callback
            loop.call_soon_threadsafe(loop_ran.set)
            waits.append(loop_ran.wait(timeout=5))
        return count_tokens(text)

    async def read() -> None:
        fixed = fit_fixed(2_000, [], [], "", "", count_tokens)
        q = context_reads.ContextQuery(workspace_id="w", session_id="s", search_query="x")
        await context_reads._with_recent(None, q, fixed, _heavy_candidates(3))

    monkeypatch.setattr(context_reads, "count_tokens", count)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(read())
    finally:
        loop.close()
    assert waits == [True]
