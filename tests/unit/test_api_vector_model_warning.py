"""The API's start-up advice about stored vectors of another model never stops the API."""

from __future__ import annotations

import logging
import socket
from types import SimpleNamespace

from projections.db import async_engine
from projections.settings import DatabaseSettings
from services.api.server import _warn_of_other_vector_models


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket closes


async def test_a_database_away_at_start_is_logged_not_raised(caplog) -> None:
    url = f"postgresql+psycopg://peerlog@127.0.0.1:{_closed_port()}/peerlog?connect_timeout=2"
    engine = async_engine(DatabaseSettings(url=url))
    ctx = SimpleNamespace(engine=engine, embedder=SimpleNamespace(model_name="e5-small-v2"))
    try:
        with caplog.at_level(logging.WARNING, logger="services.api.server"):
            await _warn_of_other_vector_models(ctx)
    finally:
        await engine.dispose()
    assert "could not count the stored vectors of other embedding models" in caplog.text
