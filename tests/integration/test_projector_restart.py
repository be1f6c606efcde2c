"""A killed projector started again under its instance id takes its partitions back at once (static
group membership), instead of waiting for the dead member's session to expire."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from sqlalchemy import func, select

from projections.db import create_schema, sync_engine
from projections.schema import messages
from services.bus.producer import EventLog
from services.events import MessageAppended, ProducerInfo, SessionCreated, WorkspaceCreated
from tests.support.processes import Worker
from tests.support.wait import eventually

P = ProducerInfo(component="test", version="0")
# long, so that waiting it out cannot pass for taking the partitions back
SESSION_TIMEOUT_S = 60


def msg(i: int) -> MessageAppended:
    return MessageAppended(
        workspace_id="w",
        session_id="s1",
        message_id=f"m{i}",
        peer_id="alice",
        content=f"turn {i}",
        created_at=datetime.now(UTC),
        producer=P,
    )


def projected(engine) -> int:
    with engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(messages))


def test_a_projector_killed_and_started_again_under_its_instance_id_resumes_before_its_old_session_expires(
    settings, tmp_path
):
    engine = sync_engine(settings.database)
    create_schema(engine, settings.database.schema_name)
    env = {"PEERLOG_PROJECTOR_INSTANCE_ID": "projector-1", "PEERLOG_PROJECTOR_SESSION_TIMEOUT_S": "60"}
    log = EventLog(settings.kafka)
    log.start()
    first = Worker(settings, tmp_path / "first.log", env, command="projector run").start()
    second = Worker(settings, tmp_path / "second.log", env, command="projector run")
    try:
        log.append_sync(
            [
                WorkspaceCreated(workspace_id="w", producer=P),
                SessionCreated(workspace_id="w", session_id="s1", producer=P),
            ]
        )
        log.append_sync([msg(i) for i in range(10)])
        eventually(lambda: projected(engine) == 10, timeout=60)

        first.kill()
        log.append_sync([msg(i) for i in range(10, 20)])
        started = time.monotonic()
        second.start()
        eventually(lambda: projected(engine) == 20, timeout=SESSION_TIMEOUT_S)
        resumed_s = time.monotonic() - started
        # a process start and a join, not the dead member's 60 s session
        assert resumed_s < SESSION_TIMEOUT_S / 2, second.log_text()[-2000:]
    finally:
        first.kill()
        second.stop()
        log.close()
        engine.dispose()
