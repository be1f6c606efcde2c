"""Issue 17 §2.3: an embedding or Postgres outage inside the deriver parks the batch (retried first, then
dead-lettered, derivable later by `peerlog derivations retry`); the worker keeps running."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from infra.processes import free_port
from projections.db import create_schema, sync_engine
from projections.deriver_reads import ObservationStore
from services.cli.client import Client
from services.deriver.settings import DeriverSettings
from services.events.pairs import Pair
from services.rederivation.rederive import DerivationScope
from services.rederivation.retry import retry
from tests.integration.test_chat import PROVIDER_REFUSAL
from tests.integration.test_rederive import current_rows
from tests.support.extractor import extract_each_turn
from tests.support.model_server import Reply
from tests.support.wait import until

QUICK_RETRIES = {
    "PEERLOG_EMBEDDING_MAX_RETRIES": "1",
    "PEERLOG_EMBEDDING_BACKOFF_S": "0.05",
    "PEERLOG_DERIVER_STORE_RETRIES": "1",
    "PEERLOG_DERIVER_STORE_BACKOFF_S": "0.05",
}


def embedding_env(model_server) -> dict[str, str]:
    """The deriver embeds with the test model server (over HTTP), so a test can take it down."""
    return {
        "PEERLOG_EMBEDDING_PROVIDER": "openai",
        "PEERLOG_EMBEDDING_BASE_URL": model_server.base_url,
        "PEERLOG_EMBEDDING_MODEL": "test-embedding",
    }


async def dead_letters(c: Client, n: int):
    status = await until(lambda: c.processing_status("w"), lambda s: s.counts.dead_lettered >= n, timeout=90)
    return status.dead_lettered_batches


async def test_a_batch_the_model_server_refused_is_parked_without_the_servers_reply(
    channel, settings, model_server, start_worker
):
    # a dead-lettered batch's error is in the log for good and shown to the observer's status readers
    model_server.reply_with(lambda req: Reply(status=401, error_body=PROVIDER_REFUSAL))
    start_worker("router,deriver", **QUICK_RETRIES)
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    await c.add("w", "s", [("alice", "I live in Oslo")])
    [parked] = await dead_letters(c, 1)
    assert "HTTP 401" in parked.error and "sk-proj" not in parked.error and "Incorrect API key" not in parked.error


async def test_an_embedding_outage_parks_the_batch_keeps_the_worker_and_retry_derives_it_once(
    channel, settings, model_server, start_worker
):
    model_server.reply_with(extract_each_turn)
    model_server.fail_embeddings(503)
    worker = start_worker("router,deriver", **embedding_env(model_server), **QUICK_RETRIES)
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    await c.add("w", "s", [("alice", "I live in Oslo")])
    [parked] = await dead_letters(c, 1)
    assert "unavailable" in parked.error and worker.proc.poll() is None

    model_server.fail_embeddings(None)  # the outage ends: the same worker derives the next message
    await c.add("w", "s", [("alice", "I have a cat")])
    await until(lambda: c.processing_status("w"), lambda s: s.counts.done == 1, timeout=90)
    assert worker.proc.poll() is None

    here = settings.model_copy(
        update={
            "llm": settings.llm.model_copy(update={"base_url": model_server.base_url}),
            "embedding": settings.embedding.model_copy(
                update={"provider": "openai", "base_url": model_server.base_url, "model": "test-embedding"}
            ),
        }
    )
    [report] = await retry(here, DerivationScope("w"), progress=lambda _: None)
    assert (report.messages, report.batches) == (1, 1)
    status = await until(lambda: c.processing_status("w", token=report.consistency_token), lambda s: s.counts.done == 2)
    assert status.counts.dead_lettered == 0
    assert sorted(r["content"] for r in current_rows(settings)) == [
        "The target said: I have a cat",
        "The target said: I live in Oslo",
    ]  # nothing lost, nothing twice


async def test_an_unreachable_database_parks_each_batch_and_the_worker_keeps_going(
    channel, settings, model_server, start_worker
):
    model_server.reply_with(extract_each_turn)
    nowhere = make_url(settings.database.url).set(port=free_port()).render_as_string(hide_password=False)
    worker = start_worker("router,deriver", PEERLOG_DATABASE_URL=nowhere, **QUICK_RETRIES)
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    await c.add("w", "s", [("alice", "I live in Oslo")])
    [parked] = await dead_letters(c, 1)
    assert "observation store unavailable after 2 attempt(s)" in parked.error
    await c.add("w", "s", [("alice", "I have a cat")])
    assert len(await dead_letters(c, 2)) == 2  # the worker is still consuming
    assert worker.proc.poll() is None and not current_rows(settings)


async def test_a_connection_the_database_dropped_is_replaced_and_the_lookup_still_answers(settings):
    admin = sync_engine(settings.database)
    create_schema(admin, settings.database.schema_name)
    engine = create_async_engine(settings.database.url, pool_size=1, max_overflow=0)  # one connection, reused
    store = ObservationStore(engine, settings.database.schema_name, "m", DeriverSettings(store_backoff_s=0.01))
    lookup = (Pair("w", "alice", "alice"), ["alice lives in oslo"], [[1.0] + [0.0] * 383], ["s"])
    try:
        assert await store.candidates(*lookup) == []
        async with engine.connect() as conn:
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        with admin.begin() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
        assert await store.candidates(*lookup) == []  # the dead connection failed once, a new one answered
    finally:
        await engine.dispose()
        admin.dispose()
