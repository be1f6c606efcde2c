"""The API and `peerlog webhooks` both create the webhook tables as they start: started at once on a fresh
database, both start (two CREATE ... IF NOT EXISTS at once collided on Postgres' catalogue, 4 times in 10)."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import create_engine, inspect, text

from projections.settings import DatabaseSettings
from services.webhooks.store import engine_for

STARTS = 3  # the API's processes and the webhook process, at once


def _start_at_once(settings: DatabaseSettings) -> list[str]:
    """What each of STARTS threads got from engine_for, all let go together: "ok" or the error."""
    barrier = threading.Barrier(STARTS)

    def start() -> str:
        barrier.wait()
        try:
            engine_for(settings).dispose()
        except Exception as err:  # the outcome is what the test reads
            return f"{type(err).__name__}: {str(err).splitlines()[0]}"
        return "ok"

    with ThreadPoolExecutor(STARTS) as pool:
        return list(pool.map(lambda _: start(), range(STARTS)))


def test_two_processes_creating_the_webhook_tables_at_once_both_start(infra):
    schemas = [f"t{uuid.uuid4().hex[:10]}" for _ in range(10)]
    admin = create_engine(infra.database_url)
    try:
        for schema in schemas:  # each a fresh database as far as the webhook tables go
            settings = DatabaseSettings(url=infra.database_url, schema_name=schema)
            assert _start_at_once(settings) == ["ok"] * STARTS, schema
            tables = inspect(admin).get_table_names(schema=f"{schema}_webhooks")
            assert set(tables) == {"webhook_endpoints", "webhook_progress", "webhook_dead_letters"}
    finally:
        with admin.begin() as conn:
            for schema in schemas:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}_webhooks" CASCADE'))
        admin.dispose()
