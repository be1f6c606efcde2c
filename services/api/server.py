"""The asyncio gRPC server: servicers, health, reflection, interceptors, graceful stop."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import threading
from dataclasses import dataclass, field

import grpc
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_private_key
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from peerlog.v1 import (
    audit_pb2,
    audit_pb2_grpc,
    configuration_pb2,
    configuration_pb2_grpc,
    context_pb2,
    context_pb2_grpc,
    dialectic_pb2,
    dialectic_pb2_grpc,
    dreams_pb2,
    dreams_pb2_grpc,
    events_pb2,
    events_pb2_grpc,
    messages_pb2,
    messages_pb2_grpc,
    observations_pb2,
    observations_pb2_grpc,
    peers_pb2,
    peers_pb2_grpc,
    scopes_pb2,
    scopes_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
    webhooks_pb2,
    webhooks_pb2_grpc,
    workspaces_pb2,
    workspaces_pb2_grpc,
)
from projections.db import async_engine, create_schema, sync_engine
from projections.outages import DATABASE_AWAY, while_database_away
from projections.tool_reads import SqlChatReads
from projections.vector_model_reads import vectors_of_other_models
from services import tracing
from services.api import uploads
from services.api import validation as v
from services.api.auth import AuthInterceptor
from services.api.backpressure import Backpressure
from services.api.cursors import PageCursors
from services.api.deps import ApiDeps
from services.api.errors import ErrorInterceptor
from services.api.event_servicers import EventServicer, WebhookServicer
from services.api.freshness import Freshness
from services.api.health import HealthMonitor, database_reachable, probe_engine
from services.api.projected import ProjectedPositions
from services.api.servicers import (
    AuditServicer,
    ConfigurationServicer,
    ContextServicer,
    DialecticServicer,
    DreamServicer,
    MessageServicer,
    ObservationServicer,
    PeerServicer,
    ScopeServicer,
    SessionServicer,
    WorkspaceServicer,
)
from services.api.settings import ApiSettings, AuthSettings
from services.api.telemetry import TelemetryInterceptor
from services.api.tokens import Verifier
from services.bus.log_ends import LogEnds
from services.bus.producer import EventLog
from services.dialectic.loop import Dialectic
from services.dialectic.settings import LEVELS
from services.llm.client import ModelClient
from services.llm.embeddings import LocalOnnxEmbedder, make_embedder
from services.llm.query_cache import QueryVectorCache
from services.llm.rerank import Reranker, make_reranker
from services.llm.tokens import count_tokens
from services.settings import Settings
from services.webhooks.store import WebhookStore, engine_for

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    context_pb2.DESCRIPTOR.services_by_name["ContextService"].full_name,
    dialectic_pb2.DESCRIPTOR.services_by_name["DialecticService"].full_name,
    workspaces_pb2.DESCRIPTOR.services_by_name["WorkspaceService"].full_name,
    peers_pb2.DESCRIPTOR.services_by_name["PeerService"].full_name,
    sessions_pb2.DESCRIPTOR.services_by_name["SessionService"].full_name,
    messages_pb2.DESCRIPTOR.services_by_name["MessageService"].full_name,
    observations_pb2.DESCRIPTOR.services_by_name["ObservationService"].full_name,
    dreams_pb2.DESCRIPTOR.services_by_name["DreamService"].full_name,
    audit_pb2.DESCRIPTOR.services_by_name["AuditService"].full_name,
    configuration_pb2.DESCRIPTOR.services_by_name["ConfigurationService"].full_name,
    events_pb2.DESCRIPTOR.services_by_name["EventService"].full_name,
    webhooks_pb2.DESCRIPTOR.services_by_name["WebhookService"].full_name,
    scopes_pb2.DESCRIPTOR.services_by_name["ScopeService"].full_name,
)


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    ctx: ApiDeps
    ends: LogEnds | None = None
    webhooks: WebhookStore | None = None
    background: list[asyncio.Task] = field(default_factory=list)
    probe: AsyncEngine | None = None  # the health check's own engine

    async def stop(self, grace: float = 5.0) -> None:
        for task in self.background:
            task.cancel()
        await self.server.stop(grace)
        self.ctx.log.close()
        if self.ends is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.ends.close)
        await self.ctx.engine.dispose()
        if self.probe is not None:
            await self.probe.dispose()
        if self.webhooks is not None:
            self.webhooks.engine.dispose()
        for model in self.ctx.dialectic.models.values() if self.ctx.dialectic else ():
            await model.aclose()
        close = getattr(self.ctx.embedder, "aclose", None)  # an HTTP embedder holds connections
        if close is not None:
            await close()


def _register(
    server: grpc.aio.Server, ctx: ApiDeps, webhooks: WebhookStore, settings: Settings
) -> health.aio.HealthServicer:
    workspaces_pb2_grpc.add_WorkspaceServiceServicer_to_server(WorkspaceServicer(ctx), server)
    peers_pb2_grpc.add_PeerServiceServicer_to_server(PeerServicer(ctx), server)
    sessions_pb2_grpc.add_SessionServiceServicer_to_server(SessionServicer(ctx), server)
    messages_pb2_grpc.add_MessageServiceServicer_to_server(MessageServicer(ctx), server)
    context_pb2_grpc.add_ContextServiceServicer_to_server(ContextServicer(ctx), server)
    observations_pb2_grpc.add_ObservationServiceServicer_to_server(ObservationServicer(ctx), server)
    dreams_pb2_grpc.add_DreamServiceServicer_to_server(DreamServicer(ctx), server)
    audit_pb2_grpc.add_AuditServiceServicer_to_server(AuditServicer(ctx), server)
    dialectic_pb2_grpc.add_DialecticServiceServicer_to_server(
        DialecticServicer(ctx, settings.api.chats_per_workspace), server
    )
    configuration_pb2_grpc.add_ConfigurationServiceServicer_to_server(ConfigurationServicer(ctx), server)
    events_pb2_grpc.add_EventServiceServicer_to_server(
        EventServicer(ctx, settings.api.max_subscriptions, settings.api.max_subscriptions_per_workspace), server
    )
    webhooks_pb2_grpc.add_WebhookServiceServicer_to_server(WebhookServicer(ctx, webhooks, settings.webhook), server)
    scopes_pb2_grpc.add_ScopeServiceServicer_to_server(ScopeServicer(ctx), server)
    checker = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    reflection.enable_server_reflection((*SERVICE_NAMES, reflection.SERVICE_NAME, health.SERVICE_NAME), server)
    return checker


def _health(checker: health.aio.HealthServicer, probe: AsyncEngine, ends: LogEnds, settings: Settings) -> HealthMonitor:
    """SERVING only while the log and the projections answer (checked every few seconds); Postgres through
    `probe`, not the read pool, whose queue says how busy the server is, not whether Postgres answers."""
    checks = {"kafka": ends.reachable, "postgres": lambda: database_reachable(probe)}
    return HealthMonitor(checker, (*SERVICE_NAMES, ""), checks, settings.api.health_interval_s)


def create_schemas(settings: Settings) -> None:
    """The projections' and webhooks' tables, made once by the supervisor of several API processes: two
    processes creating the same table at once collide in Postgres's catalog (a duplicate key error)."""
    _ensure_schema(settings)
    _webhook_engine(settings).dispose()


def _ensure_schema(settings: Settings, stopping: threading.Event | None = None) -> None:
    # reads must not fail with "relation does not exist" just because the projector starts later
    engine = sync_engine(settings.database)
    try:
        _at_start(stopping)(create_schema, engine, settings.database.schema_name)
    finally:
        engine.dispose()


def _webhook_engine(settings: Settings, stopping: threading.Event | None = None):
    return _at_start(stopping)(engine_for, settings.database)


def _at_start(stopping: threading.Event | None):
    """A start that finds Postgres away (restarting, as a deploy restarts everything) waits for it, as the
    projector does, instead of exiting; `stopping` (SIGTERM) ends the wait with the error."""
    return while_database_away(stopping or threading.Event(), "API start")


def _dialectic(settings: Settings, engine, embedder, reranker: Reranker | None) -> Dialectic:
    stages = {level: settings.dialectic.level(level).stage for level in LEVELS}
    models = {level: ModelClient(stage, settings.llm.stage(stage)) for level, stage in stages.items()}
    chat_reranker = reranker if settings.rerank.chat else None
    return Dialectic(SqlChatReads(engine), embedder, settings.dialectic, models, chat_reranker)


def _interceptors(auth: AuthSettings) -> list[grpc.aio.ServerInterceptor]:
    """Metrics and tracing outermost (refusals count too), then authentication (a refused call reaches
    nothing), then the error table."""
    if not auth.enabled:
        log.warning("PEERLOG_AUTH=off: the API serves every call without a token, to anyone who reaches the port")
        return [TelemetryInterceptor(), ErrorInterceptor()]
    return [TelemetryInterceptor(), AuthInterceptor(verifier(auth)), ErrorInterceptor()]


def verifier(auth: AuthSettings) -> Verifier:
    """The token verifier; ValueError saying what to set when the key is missing, unusable or weak."""
    try:
        return Verifier(auth)
    except ValueError as err:
        raise ValueError(f"{err}; or set PEERLOG_AUTH=off to serve without authentication") from None


def _read_pem(path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None


def _certificates(pem: bytes, setting: str, path) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise ValueError(f"{setting} {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)") from None


def _check_tls(api: ApiSettings, cert: bytes, key: bytes, ca: bytes | None) -> None:
    """ValueError naming the setting when a TLS file is not what it should be: gRPC would only say
    "Failed to bind"."""
    chain = _certificates(cert, "PEERLOG_API_TLS_CERT", api.tls_cert)
    if ca is not None:
        _certificates(ca, "PEERLOG_API_TLS_CLIENT_CA", api.tls_client_ca)
    try:
        private = load_pem_private_key(key, password=None)
    except TypeError:
        raise ValueError(
            f"PEERLOG_API_TLS_KEY {api.tls_key} is encrypted; give the server an unencrypted key"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise ValueError(f"PEERLOG_API_TLS_KEY {api.tls_key} holds no PEM private key") from None
    spki = (Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    if private.public_key().public_bytes(*spki) != chain[0].public_key().public_bytes(*spki):
        raise ValueError(
            f"PEERLOG_API_TLS_KEY {api.tls_key} is not the key of the certificate in PEERLOG_API_TLS_CERT "
            f"{api.tls_cert} (the first one there must be the server's own)"
        )


def tls_credentials(api: ApiSettings) -> grpc.ServerCredentials | None:
    """The server's TLS credentials (mutual with a client CA), checked; None: plaintext."""
    if api.tls_cert is None:
        return None
    cert, key = _read_pem(api.tls_cert), _read_pem(api.tls_key)
    ca = _read_pem(api.tls_client_ca) if api.tls_client_ca else None
    _check_tls(api, cert, key, ca)
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


def _address(api: ApiSettings) -> str:
    # settings made in code skip validation, and gRPC takes a port past 65535 modulo 65536
    if not 0 <= api.port <= 65535:
        raise ValueError(f"PEERLOG_API_PORT {api.port} is no port (0 to 65535)")
    return f"{api.host}:{api.port}"


def _listen(server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None) -> int:
    """Bind the port: TLS when there are credentials, else plaintext."""
    try:
        if credentials is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, credentials)
    except RuntimeError as err:  # gRPC says only "Failed to bind to address"
        raise ValueError(
            f"cannot listen on {address} ({err}): is the port taken, or PEERLOG_API_HOST no address of this machine?"
        ) from None


def serve_metrics(api: ApiSettings, registry: CollectorRegistry = REGISTRY) -> None:
    """Serve `registry` on the metrics port; ValueError saying which setting to check when it cannot."""
    try:
        start_http_server(api.metrics_port, addr=api.metrics_host, registry=registry)
    except (OSError, OverflowError) as err:  # OverflowError: a port past 65535 in settings made in code
        why = getattr(err, "strerror", None) or err
        raise ValueError(
            f"cannot serve metrics on {api.metrics_host}:{api.metrics_port} ({why}); check "
            "PEERLOG_API_METRICS_PORT and PEERLOG_API_METRICS_HOST"
        ) from None


# a connection is pinged after a minute without traffic and dropped if the ping is not answered in 20 s: an
# idle Subscribe whose client vanished (a NAT's idle timeout, a killed laptop) kept its consumer and its
# place among the workspace's streams for gRPC's default of two hours
KEEPALIVE = (
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.min_ping_interval_without_data_ms", 30_000),
)


async def start(settings: Settings, stopping: threading.Event | None = None) -> RunningServer:
    """Start serving on settings.api.host:port (port 0 picks a free one). While Postgres is away, wait for
    it until `stopping` is set."""
    interceptors = _interceptors(settings.auth)  # first: a missing key fails before anything opens
    address, credentials = _address(settings.api), tls_credentials(settings.api)  # so do a bad port and TLS files
    await asyncio.get_running_loop().run_in_executor(None, _ensure_schema, settings, stopping)
    # first: a misconfigured model fails before anything opens
    embedder = QueryVectorCache(make_embedder(settings.embedding), settings.embedding.query_cache_size)
    reranker = make_reranker(settings.rerank)
    engine = async_engine(settings.database)
    event_log = EventLog(settings.kafka, instance=settings.api.instance_id)
    await asyncio.get_running_loop().run_in_executor(None, event_log.start)
    ends = LogEnds(settings.kafka)
    await asyncio.get_running_loop().run_in_executor(None, ends.list_topics)
    # one read of the projector's positions for all the reads waiting on a token, and one for all the
    # writes held back: a write can wait 20 ms between looks (what was measured under full ingest); a
    # read that waits for its own write wants them closer
    reads, writes = ProjectedPositions(engine, interval_s=0.01), ProjectedPositions(engine, interval_s=0.02)
    ctx = ApiDeps(
        engine=engine,
        log=event_log,
        freshness=Freshness(reads, settings.api.consistency_wait_s, ends),
        backpressure=Backpressure(writes, settings.api.write_backlog_records, settings.api.write_backlog_wait_s),
        embedder=embedder,
        reranker=reranker,
        dialectic=_dialectic(settings, engine, embedder, reranker),
        cursors=PageCursors.from_setting(settings.api.cursor_key.get_secret_value()),
        configuration=settings.configuration(),
    )
    # without SO_REUSEPORT a second server on a taken port fails loudly instead of sharing it; with
    # several processes (services/api/processes.py) they share it on purpose
    shared = settings.api.processes > 1
    # the receive limit admits the largest request the documented limits allow (gRPC's default, 4 MiB, did
    # not: 100 messages of 25,000 three-byte characters were refused by the transport). The call limits bound
    # what those requests may hold at once: a request is received and decoded before its token is checked, so
    # a caller without one opened streams without end, each sending 50 MB
    options = [
        ("grpc.so_reuseport", int(shared)),
        ("grpc.max_receive_message_length", v.MAX_REQUEST_BYTES),
        ("grpc.max_concurrent_streams", settings.api.max_streams_per_connection),
        *KEEPALIVE,
    ]
    server = grpc.aio.server(
        interceptors=interceptors, options=options, maximum_concurrent_rpcs=settings.api.max_concurrent_rpcs
    )
    uploads.bound(settings.api)
    webhooks = WebhookStore(await asyncio.get_running_loop().run_in_executor(None, _webhook_engine, settings, stopping))
    probe = probe_engine(settings.database)
    monitor = _health(_register(server, ctx, webhooks, settings), probe, ends, settings)
    await monitor.check_once()  # the first answer is already a real one
    port = _listen(server, address, credentials)
    await server.start()
    log.info(
        "peerlog API listening on %s:%d (%s)", settings.api.host, port, "TLS" if settings.api.tls_cert else "plaintext"
    )
    background = [asyncio.get_running_loop().create_task(monitor.run())]
    return RunningServer(server, port, ctx, ends, webhooks, background, probe)


async def _warm(ctx: ApiDeps) -> None:
    """Load the tokenizer and a local embedding model now rather than in the first caller's request."""
    count_tokens("warm-up")
    model = getattr(ctx.embedder, "inner", ctx.embedder)  # past the query cache: "warm-up" is no query
    if isinstance(model, LocalOnnxEmbedder):
        await model.embed(["warm-up"])


async def _warn_of_other_vector_models(ctx: ApiDeps) -> None:
    """Log the stored vectors semantic search cannot see: those of another model than the active one."""
    active = ctx.embedder.model_name
    try:
        async with ctx.engine.connect() as conn:
            others = await vectors_of_other_models(conn, active)
    except SQLAlchemyError as err:  # advice only: a database away at this moment must not stop the API
        log.warning("could not count the stored vectors of other embedding models: %s", err)
        return
    for model, n in others.items():
        log.warning(
            "about %d messages and observations hold vectors of %s, not of the active embedding model %s: semantic "
            "search skips them until `peerlog reembed --model %s -w <workspace>` and a rebuild (README, Changing the "
            "embedding model), or PEERLOG_EMBEDDING_MODEL=%s",
            n,
            model,
            active,
            active,
            model,
        )


async def serve(settings: Settings, metrics: bool = True, advise: bool = True) -> None:
    """Serve until SIGTERM/SIGINT, then drain in-flight calls. `advise`: check the stored vectors' models
    (one of several processes does, not each)."""
    # handlers first: a SIGTERM during start-up (the port may already answer while the model loads)
    # must stop the server through the same path, not kill it before a supervisor can clean up
    tracing.setup(settings.tracing, "peerlog-api")
    stop = asyncio.Event()
    stopping = threading.Event()  # the same signal, for a start that waits for Postgres in a thread
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: (stop.set(), stopping.set()))
    # metrics before the port answers: a scrape right after the first call must not find them missing
    # while the models still warm up (a CI run scraped a refused port)
    if settings.api.metrics_port and metrics:
        serve_metrics(settings.api)
    try:
        running = await start(settings, stopping)
    except DATABASE_AWAY:
        if stopping.is_set():
            return  # stopped while waiting for Postgres: nothing was started
        raise
    await _warm(running.ctx)
    if advise:
        await _warn_of_other_vector_models(running.ctx)
    # what exists now lives as long as the process: keep the collector from re-scanning it on every
    # full collection (a GetContext allocates thousands of rows, strings and messages)
    gc.collect()
    gc.freeze()
    await stop.wait()
    await running.stop()
