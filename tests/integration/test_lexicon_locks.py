"""Two projector processes apply batches of one workspace at the same time when its sessions sit on
partitions of both: they share the workspace's lexicon rows, and must wait for each other, not deadlock."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from sqlalchemy import select, text

from projections import apply
from projections.apply import Record, apply_batch
from projections.db import create_schema, sync_engine
from projections.schema import message_lexicon
from services.events import MessageAppended, SessionCreated, WorkspaceCreated, encode
from tests.integration.test_projector import P

FRUIT = "apples bananas cherries dates figs grapes"
TOOLS = "hammers nails saws drills chisels planes"


def said(session: str, i: int, words: str) -> MessageAppended:
    return MessageAppended(
        workspace_id="w",
        session_id=session,
        message_id=f"{session}-{i}",
        peer_id="ann",
        content=words,
        created_at=datetime.now(UTC),
        producer=P,
    )


def records(partition: int, events) -> list[Record]:
    return [Record("peerlog.sessions", partition, i, None, encode(e)) for i, e in enumerate(events)]


def lock_waiters(engine) -> int:
    with engine.connect() as conn:
        return conn.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
        )


def test_two_projectors_writing_one_workspaces_lexicon_at_once_wait_for_each_other(settings, monkeypatch):
    engine = sync_engine(settings.database)
    create_schema(engine, settings.database.schema_name)
    setup = [WorkspaceCreated(workspace_id="w", producer=P)]
    setup += [SessionCreated(workspace_id="w", session_id=s, producer=P) for s in ("s1", "s2")]
    with engine.begin() as conn:
        apply_batch(conn, records(0, setup))
    # each batch: a run of messages, a session event, another run; the words of the two runs crossed, so
    # each batch's second run wants the lexicon rows the other's first run counts
    batches = {
        1: [said("s1", 0, FRUIT), SessionCreated(workspace_id="w", session_id="s3", producer=P), said("s1", 1, TOOLS)],
        2: [said("s2", 0, TOOLS), SessionCreated(workspace_id="w", session_id="s4", producer=P), said("s2", 1, FRUIT)],
    }
    first_between_runs, second_done = threading.Event(), threading.Event()
    created = apply.HANDLERS[SessionCreated]

    def created_then_let_the_other_go(conn, events):
        created(conn, events)
        if events[0].session_id == "s3":  # the first projector, between its runs: the second one goes
            first_between_runs.set()  # until it is done or waits on a lock the first one holds
            deadline = time.monotonic() + 30
            while not second_done.is_set() and not lock_waiters(engine) and time.monotonic() < deadline:
                time.sleep(0.05)

    monkeypatch.setitem(apply.HANDLERS, SessionCreated, created_then_let_the_other_go)
    failures: list[BaseException] = []

    def projector(partition: int) -> None:
        try:
            if partition == 2:
                first_between_runs.wait(timeout=30)
            with engine.begin() as conn:
                apply_batch(conn, records(partition, batches[partition]))
        except BaseException as exc:  # noqa: BLE001 (reported by the assertion below)
            failures.append(exc)
        finally:
            if partition == 2:
                second_done.set()

    threads = [threading.Thread(target=projector, args=(p,)) for p in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert failures == []  # before: one of them ended with DeadlockDetected
    lx = message_lexicon.c
    with engine.connect() as conn:
        docs = dict(conn.execute(select(lx.lexeme, lx.docs).where(lx.workspace_id == "w")).all())
    # each word in two messages, one of each batch; four messages in all
    assert {docs[w] for w in ("appl", "banana", "hammer", "nail")} == {2} and docs[""] == 4
    engine.dispose()
