"""Health follows Kafka and Postgres, and an outage of either (or of a model) reaches clients as
UNAVAILABLE, a status they may retry, never INTERNAL."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from infra.processes import free_port
from peerlog.v1 import workspaces_pb2, workspaces_pb2_grpc
from projections.db import async_engine
from projections.settings import DatabaseSettings
from services.api.backpressure import Backpressure
from services.api.deps import ApiDeps
from services.api.errors import ErrorInterceptor
from services.api.freshness import Freshness
from services.api.health import HealthMonitor, database_reachable, probe_engine
from services.api.projected import ProjectedPositions
from services.api.server import start
from services.api.servicers import WorkspaceServicer
from services.bus.log_ends import LogEnds
from services.bus.settings import KafkaSettings
from services.llm.errors import EmbeddingError, TokenizerUnavailable
from tests.support.auth import admin_channel
from tests.support.rpc import rejected
from tests.support.wait import until

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def dead_database() -> DatabaseSettings:
    return DatabaseSettings(url=f"postgresql+psycopg://peerlog@127.0.0.1:{free_port()}/peerlog", schema_name="t")


async def health_of(channel: grpc.aio.Channel, service: str = "") -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return (await stub.Check(health_pb2.HealthCheckRequest(service=service))).status


async def test_health_says_not_serving_while_the_broker_is_down_and_serving_once_it_is_back(infra, settings):
    if infra.kafka is None:
        pytest.skip("needs the local broker, which the tests can stop")
    fast = settings.model_copy(update={"api": settings.api.model_copy(update={"health_interval_s": 0.3})})
    server = await start(fast)
    loop = asyncio.get_running_loop()
    try:
        async with admin_channel(fast, server.port) as channel:
            assert await health_of(channel) == SERVING
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
            assert (await watch.read()).status == SERVING  # Watch streams, too (it failed as INTERNAL)
            await loop.run_in_executor(None, infra.kafka.stop)
            try:
                await until(lambda: health_of(channel), lambda status: status == NOT_SERVING, 30)
                assert await health_of(channel, "peerlog.v1.WorkspaceService") == NOT_SERVING
            finally:
                await loop.run_in_executor(None, infra.kafka.start)
            await until(lambda: health_of(channel), lambda status: status == SERVING, 60)
            statuses = [(await watch.read()).status for _ in range(2)]
            assert statuses == [NOT_SERVING, SERVING]
            watch.cancel()
    finally:
        await server.stop(0)


async def test_the_dependency_checks_fail_against_unreachable_endpoints_and_pass_against_real_ones(infra, settings):
    dead = probe_engine(dead_database())
    live = probe_engine(settings.database)
    nowhere = LogEnds(KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}"), timeout_s=1.0)
    broker = LogEnds(settings.kafka)
    try:
        assert await database_reachable(dead) is False
        assert await database_reachable(live) is True
        assert await nowhere.reachable() is False
        assert await broker.reachable() is True
    finally:
        await dead.dispose()
        await live.dispose()
        nowhere.close()
        broker.close()


async def test_the_monitor_reports_not_serving_when_postgres_does_not_answer():
    dead = probe_engine(dead_database())
    servicer = health.aio.HealthServicer()

    async def kafka_up() -> bool:
        return True

    monitor = HealthMonitor(
        servicer,
        ("", "peerlog.v1.WorkspaceService"),
        {"kafka": kafka_up, "postgres": lambda: database_reachable(dead)},
        interval_s=1,
    )
    try:
        assert await monitor.check_once() is False
        for name in ("", "peerlog.v1.WorkspaceService"):
            response = await servicer.Check(health_pb2.HealthCheckRequest(service=name), None)
            assert response.status == NOT_SERVING
    finally:
        await dead.dispose()


async def test_health_stays_serving_while_the_read_pool_is_saturated(settings):
    # the check borrowed from the read pool and queued behind slow reads: it timed out and a busy server,
    # Postgres answering, said NOT_SERVING, so a load balancer would pull exactly the loaded instances
    from sqlalchemy import text

    fast = settings.model_copy(update={"api": settings.api.model_copy(update={"health_interval_s": 0.3})})
    server = await start(fast)
    pool = server.ctx.engine.sync_engine.pool
    stop = asyncio.Event()

    async def slow_reads() -> None:
        while not stop.is_set():
            async with server.ctx.engine.connect() as conn:
                await conn.execute(text("SELECT pg_sleep(0.5)"))

    # 80 callers on 15 connections: a connection of the pool is some 2.7 s away, past the check's 2 s
    readers = [asyncio.create_task(slow_reads()) for _ in range(80)]
    try:
        async with admin_channel(fast, server.port) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
            assert (await watch.read()).status == SERVING
            with pytest.raises(TimeoutError):  # some 20 checks, and not one change of status
                await asyncio.wait_for(watch.read(), 6)
            assert pool.checkedout() == pool.size() + 10  # still saturated: every connection, overflow too
            assert await health_of(channel) == SERVING
            watch.cancel()
    finally:
        stop.set()
        await asyncio.gather(*readers)
        await server.stop(0)


async def serve(*handlers) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(interceptors=[ErrorInterceptor()])
    server.add_generic_rpc_handlers(handlers)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def test_a_postgres_outage_reaches_the_client_as_unavailable_without_its_internals():
    dead = async_engine(dead_database())
    projected = ProjectedPositions(dead, interval_s=0.01)
    ctx = ApiDeps(
        engine=dead,
        log=None,
        freshness=Freshness(projected, 1.0),
        backpressure=Backpressure(projected, 0, 1.0),
        embedder=None,
    )
    server = grpc.aio.server(interceptors=[ErrorInterceptor()])
    workspaces_pb2_grpc.add_WorkspaceServiceServicer_to_server(WorkspaceServicer(ctx), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await workspaces_pb2_grpc.WorkspaceServiceStub(channel).GetWorkspace(
                    workspaces_pb2.GetWorkspaceRequest(workspace_id="acme")
                )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "database is unavailable" in refused.value.details()
        assert "127.0.0.1" not in refused.value.details()  # no host, port or SQL for the caller
    finally:
        await server.stop(0)
        await dead.dispose()


async def test_a_read_postgres_ends_logs_one_line_without_the_callers_words(settings, caplog):
    # before: the log got SQLAlchemy's text, over several lines, with [parameters: {'q': <the query>}]
    from sqlalchemy import text

    engine = async_engine(settings.database)
    secret = "my test came back positive, tell nobody"

    async def read(request, context):
        async with engine.connect() as conn:  # sleeps until ended, as every backend is when Postgres restarts
            await conn.execute(text("SELECT pg_sleep(30) WHERE :q <> ''"), {"q": secret})

    async def end_the_sleeper():
        async with asyncio.timeout(20):
            while True:
                async with engine.connect() as admin:
                    ended = await admin.execute(
                        text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(30)%'"
                        )
                    )
                    if ended.all():
                        return
                await asyncio.sleep(0.1)

    handler = grpc.method_handlers_generic_handler("test.Read", {"Call": grpc.unary_unary_rpc_method_handler(read)})
    server, port = await serve(handler)
    caplog.set_level(logging.WARNING, logger="services.api.errors")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary("/test.Read/Call")(b"")
            await end_the_sleeper()
            await rejected(call, grpc.StatusCode.UNAVAILABLE, "database is unavailable")
    finally:
        await server.stop(0)
        await engine.dispose()
    (line,) = [r.getMessage() for r in caplog.records if "/test.Read/Call" in r.getMessage()]
    assert "AdminShutdown" in line and "57P01" in line  # what happened, for the operator
    assert "tell nobody" not in line and "\n" not in line


@pytest.mark.parametrize(
    "error",
    [
        EmbeddingError("/models/minilm/model.onnx is missing from package 'x'"),
        TokenizerUnavailable("npm is not installed; it is needed once to fetch the cl100k_base ranks"),
    ],
)
async def test_a_missing_model_or_tokenizer_reaches_the_client_as_unavailable(error):
    async def fail(request, context):
        raise error

    handler = grpc.method_handlers_generic_handler("test.Failing", {"Call": grpc.unary_unary_rpc_method_handler(fail)})
    server, port = await serve(handler)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await channel.unary_unary("/test.Failing/Call")(b"")
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "retry later" in refused.value.details() and "npm" not in refused.value.details()
    finally:
        await server.stop(0)


async def test_a_pooled_connection_postgres_dropped_while_idle_is_replaced_before_a_read_uses_it(settings, monkeypatch):
    import psycopg
    from sqlalchemy import text

    from projections import db

    single = settings.database.model_copy(update={"pool_size": 1})
    engine = async_engine(single)  # one pooled connection: each read borrows the same one
    pid = text("SELECT pg_backend_pid()")
    try:
        async with engine.connect() as conn:
            first = await conn.scalar(pid)
        with psycopg.connect(single.url.replace("+psycopg", ""), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (first,))
        monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.0)  # so this one counts as idle
        async with engine.connect() as conn:
            second = await conn.scalar(pid)
        assert second != first
    finally:
        await engine.dispose()


async def test_a_pooled_connection_in_steady_use_is_not_pinged_before_a_read(settings):
    import psycopg
    from sqlalchemy import text

    single = settings.database.model_copy(update={"pool_size": 1})
    engine = async_engine(single)
    try:
        async with engine.connect() as conn:
            pid = await conn.scalar(text("SELECT pg_backend_pid() + 0"))
        async with engine.connect() as conn:  # borrowed again at once: the last statement it ran is the read's
            with psycopg.connect(single.url.replace("+psycopg", ""), autocommit=True) as admin:
                last = admin.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            assert last == ("SELECT pg_backend_pid() + 0",)
    finally:
        await engine.dispose()


async def test_health_is_not_serving_while_a_topic_is_missing(settings):
    # `peerlog serve` before `peerlog topics create` said SERVING, and every write timed out "may be on the log"
    from services.bus.admin import create_topics
    from tests.conftest import drop_topics

    fast = settings.model_copy(update={"api": settings.api.model_copy(update={"health_interval_s": 0.3})})
    drop_topics(settings.kafka)
    server = await start(fast)
    try:
        async with admin_channel(fast, server.port) as channel:
            await until(lambda: health_of(channel), lambda status: status == NOT_SERVING, 30)
            create_topics(settings.kafka)
            await until(lambda: health_of(channel), lambda status: status == SERVING, 60)
    finally:
        await server.stop(0)


async def test_health_stays_serving_when_postgres_refuses_new_connections(settings):
    # the probe opened a connection each check: at max_connections every API process said NOT_SERVING at
    # once, while their pooled connections still served. A role's connection limit stands in for it
    from sqlalchemy import make_url, text
    from sqlalchemy.exc import OperationalError

    admin = async_engine(settings.database)
    async with admin.connect() as conn:
        await conn.execute(text("DROP ROLE IF EXISTS crowded"))
        await conn.execute(text("CREATE ROLE crowded LOGIN PASSWORD 'crowded' CONNECTION LIMIT 2"))
    url = make_url(settings.database.url).set(username="crowded", password="crowded")
    crowded = settings.database.model_copy(update={"url": url.render_as_string(hide_password=False)})
    probe, others = probe_engine(crowded), async_engine(crowded)
    try:
        assert await database_reachable(probe)
        async with others.connect() as taken:  # the role's last connection: a new client is refused now
            await taken.execute(text("SELECT 1"))
            with pytest.raises(OperationalError, match="too many connections"):
                async with probe_engine(crowded).connect():
                    pass
            assert await database_reachable(probe)
    finally:
        await probe.dispose()
        await others.dispose()
        async with admin.connect() as conn:
            await conn.execute(text("DROP ROLE crowded"))
        await admin.dispose()
