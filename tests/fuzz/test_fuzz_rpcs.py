"""A short, deterministic fuzz of every RPC against the real stack (broker, Postgres, projector, API).

The long run is `tests/bench/fuzz.py`. Chat talks to the deterministic test model server.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from projections.db import sync_engine
from services.bus.topics import ALL_TOPICS
from services.dialectic.settings import DialecticSettings
from services.llm.settings import LlmSettings
from tests.fuzz.harness import Fuzzer
from tests.fuzz.rpcs import all_rpcs
from tests.support.auth import admin_token
from tests.support.webhook_receiver import Receiver, private_targets_allowed

EXAMPLES = 400  # about 11 per RPC


class ServerThread:
    """The API in its own thread and event loop, so the fuzzer can call it with a blocking client."""

    def __init__(self, settings) -> None:
        self.settings, self.loop = settings, asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzzed-api", daemon=True)

    def __enter__(self) -> ServerThread:
        from services.api.server import start

        self.thread.start()
        self.running = asyncio.run_coroutine_threadsafe(start(self.settings), self.loop).result(60)
        return self

    def __exit__(self, *exc_info) -> None:
        asyncio.run_coroutine_threadsafe(self.running.stop(0), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)

    def dead(self) -> str | None:
        return None if self.thread.is_alive() and self.loop.is_running() else "the API's event loop stopped"


def test_the_fuzzer_covers_every_rpc():
    names = {rpc.name for rpc in all_rpcs()}
    assert (
        len(names) == 53
        and {
            "DialecticService.ChatStream",
            "MessageService.AddMessages",
            "ConfigurationService.SetSessionConfiguration",
        }
        <= names
    )


def test_fuzzing_every_rpc_finds_no_violation(settings, projector, model_server):
    llm = LlmSettings(base_url=model_server.base_url, model="test-model", timeout_s=5, max_retries=0)
    served = private_targets_allowed(settings.model_copy(update={"llm": llm, "dialectic": DialecticSettings()}))
    engine = sync_engine(settings.database)
    topics = [spec.full_name(settings.kafka.topic_prefix) for spec in ALL_TOPICS]  # only the API writes here
    with ServerThread(served) as api, Receiver() as hook:
        fuzzer = Fuzzer(
            f"127.0.0.1:{api.running.port}",
            hook.url,
            settings.kafka.bootstrap_servers,
            settings.kafka.topic_prefix,
            topics,
            engine,
            settings.database.schema_name,
            alive=api.dead,
            deadline_s=20,
            token=admin_token(settings),
        )
        try:
            fuzzer.seed()
            result = fuzzer.run(EXAMPLES)
        finally:
            fuzzer.close()
            engine.dispose()
    assert result["requests"] >= EXAMPLES * 0.95
    assert set(result["requests_by_rpc"]) == {rpc.name for rpc in all_rpcs()}
    assert result["outcomes"].get("OK", 0) > EXAMPLES * 0.1, result["outcomes"]  # success paths are reached
    if result["violations"]:
        pytest.fail(
            json.dumps({k: result[k] for k in ("violations_by_kind", "violation_examples")}, indent=1, default=str)[
                :20_000
            ]
        )
