"""`peerlog` — run the services, manage topics and projections, and drive the local stack."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer
from pydantic import ValidationError

from services import collector, logs
from services.settings import Settings
from services.settings_base import variables_said

if TYPE_CHECKING:  # commands import what they use when they run: the command line starts fast
    from sqlalchemy import Engine

T = TypeVar("T")

app = typer.Typer(help="peerlog: event-sourced memory for AI agents.", no_args_is_help=True)
dev = typer.Typer(help="The local stack (Kafka, Postgres, projector, API) without Docker.")
topics = typer.Typer(help="Kafka topics.")
projections = typer.Typer(help="Postgres projections of the log.")
projector = typer.Typer(help="The projector process.")
keys = typer.Typer(help="API tokens.")
for sub, name in (
    (dev, "dev"),
    (topics, "topics"),
    (projections, "projections"),
    (projector, "projector"),
    (keys, "keys"),
):
    app.add_typer(sub, name=name)

DEV_DIR = typer.Option(Path(".peerlog/dev"), "--dir", help="where the dev stack keeps its data")


def _service_settings() -> Settings:
    """A service's settings, every one checked (the models they name too) before the service imports its
    modules, logs or connects: a bad one is one line naming the variable, exit status 2. Every service checks
    them all: the services of a deployment share one environment. Before the imports, because
    projections.schema reads the embedding settings as it is imported."""
    settings = _settings()
    _embedding_model_runs(settings)
    _rerank_model_runs(settings)
    return settings


def _set_up(settings: Settings) -> None:
    logs.configure(settings.log)
    collector.tune()  # once the command's imports are done: what they made is frozen


def _embedding_model_runs(settings: Settings) -> None:
    """Refuse a local embedding model peerlog does not have: the API and the worker failed on it."""
    from services.llm.embeddings import make_embedder
    from services.llm.errors import EmbeddingError

    if settings.embedding.provider != "local":
        return  # a server's model: only that server knows which it has
    try:
        make_embedder(settings.embedding)  # the model loads at its first use, not here
    except EmbeddingError as err:
        raise _fail(f"PEERLOG_EMBEDDING_MODEL, PEERLOG_EMBEDDING_DIMENSIONS: {err}") from None


def _rerank_model_runs(settings: Settings) -> None:
    """Refuse a re-ranking model peerlog does not have: the API failed to start with a traceback."""
    from services.llm.errors import RerankError
    from services.llm.rerank import make_reranker

    try:
        make_reranker(settings.rerank)  # the model loads at its first use, not here
    except RerankError as err:
        raise _fail(f"PEERLOG_RERANK_MODEL: {err}") from None


@app.command()
def serve() -> None:
    """Run the gRPC API server until SIGTERM. It checks tokens unless PEERLOG_AUTH=off (see `keys create`)."""
    settings = _service_settings()
    from services.api.processes import run

    _set_up(settings)
    try:
        run(settings)
    except ValueError as err:  # a missing or weak key, an unreadable certificate: said before anything serves
        raise _fail(_one_line(err)) from None


def _settings() -> Settings:
    """The settings from the environment; a bad value is one line naming the variable, never the value (it
    may be a secret), and exit status 2, not a traceback."""
    try:
        return Settings()
    except ValidationError as err:
        raise _fail(_one_line(err)) from None


def _one_line(err: ValueError) -> str:
    """A refusal in one line; a settings class's names the variables ('PEERLOG_API_PORT: Input should be
    less than or equal to 65535'), never the values, which may be secrets."""
    if not isinstance(err, ValidationError):
        return str(err)
    classes = {f.annotation.__name__: f.annotation for f in Settings.model_fields.values() if f.annotation}
    classes[Settings.__name__] = Settings
    known = classes.get(err.title)
    return variables_said(err, known.model_config["env_prefix"] if known else "")


@app.command()
def worker() -> None:
    """Run the stream processors (router, deriver, summarizer; see PEERLOG_WORKER_PROCESSORS)."""
    settings = _service_settings()
    from services.bus.admin import create_topics
    from services.worker.app import run_worker

    _set_up(settings)
    create_topics(settings.kafka)
    asyncio.run(run_worker(settings))


@app.command()
def webhooks() -> None:
    """Deliver webhooks (WebhookService) until SIGTERM. Run one: a second would deliver everything twice."""
    settings = _service_settings()
    from services.webhooks.supervisor import run_webhooks

    _set_up(settings)
    asyncio.run(run_webhooks(settings))


def _address(settings: Settings, given: str) -> str:
    return given or f"{settings.api.host}:{settings.api.port}"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


@contextmanager
def _plainly() -> Iterator[None]:
    """A refusal (a bad name or scope, a run already holding the lock), Kafka or Postgres out of reach:
    one line saying what to check, and exit status 2, instead of a traceback."""
    from confluent_kafka import KafkaException

    from projections.outages import DATABASE_AWAY, database_away, database_error_line
    from projections.run_lock import LockLost, RunInProgress
    from services.bus.producer import AppendFailed, AppendUnresolved
    from services.llm.errors import ModelError, shown

    try:
        yield
    except ValueError as err:
        raise _fail(_one_line(err)) from None
    except (LookupError, RunInProgress, LockLost) as err:  # LookupError: a topic or partition Kafka lacks
        raise _fail(str(err)) from None
    except AppendUnresolved as err:  # the runs carry on where they stopped, so again is safe either way
        raise _fail(f"Kafka did not say whether the last write was committed ({err}); running again is safe") from None
    except AppendFailed as err:
        raise _fail(
            f"Kafka did not take a write ({err}); check that the broker runs and PEERLOG_KAFKA_BOOTSTRAP_SERVERS, "
            "then run again: it carries on where it stopped"
        ) from None
    except ModelError as err:
        raise _fail(
            f"the model did not answer ({shown(err)}); check PEERLOG_EMBEDDING_BASE_URL or PEERLOG_LLM_BASE_URL "
            "and the key they name, then run again"
        ) from None
    except (KafkaException, TimeoutError) as err:
        said = err.args[0].str() if isinstance(err, KafkaException) and err.args else "no answer in time"
        raise _fail(
            f"Kafka did not answer ({said}); check that the broker runs and PEERLOG_KAFKA_BOOTSTRAP_SERVERS"
            + (", and the topic and partition" if "PARTITION" in said.upper() else "")
        ) from None
    except DATABASE_AWAY as err:
        if database_away(err):
            raise _fail(
                f"Postgres did not answer ({database_error_line(err)}); check that it runs and PEERLOG_DATABASE_URL"
            ) from None
        raise _fail(f"Postgres refused the work ({database_error_line(err)}); see its log") from None


@app.command()
def audit(
    observation_id: str,
    workspace: str = typer.Option(..., "--workspace", "-w", help="the workspace holding the observation"),
    address: str = typer.Option("", help="the API's host:port; default: PEERLOG_API_HOST/PORT"),
) -> None:
    """Print an observation's provenance (premises down to source messages and spans) and its history.
    Sends PEERLOG_AUTH_TOKEN."""
    import grpc
    from rich.console import Console

    from services.cli.audit import audit_view

    settings = _settings()
    try:
        view = audit_view(
            _address(settings, address),
            workspace,
            observation_id,
            settings.auth.token.get_secret_value(),
            _tls(settings),
        )
    except grpc.RpcError as err:
        code, at = err.code().name, _address(settings, address)
        hint = "check the observation id and -w" if code == "NOT_FOUND" else _rpc_hint(code)
        raise _fail(f"{code}: {err.details()} (the API at {at}); {hint}") from None
    Console().print(view)


derivations = typer.Typer(help="Named re-derivations of pairs' stores.")
app.add_typer(derivations, name="derivations")


def _pair_option(pair: str) -> tuple[str, str]:
    observer, sep, observed = pair.partition("/")
    if pair and not (sep and observer and observed):
        raise typer.BadParameter("--pair takes OBSERVER/OBSERVED")
    return observer, observed


def _parked(reports) -> None:
    """Exit status 1 when a run left messages dead-lettered: it did part of its work (it carries on from
    there when run again, once the model answers)."""
    parked = sum(r.parked for r in reports)
    if parked:
        typer.echo(
            f"error: {parked} messages were parked (the model kept failing on their batches; GetProcessingStatus "
            "lists them): fix the model (--model) and run this again",
            err=True,
        )
        raise typer.Exit(1)


def _run_derivation(settings: Settings, scope, start: Callable[[], Awaitable[T]]) -> T:
    """Run a rederive/promote/retry (or reembed) over `scope` once it exists; a refusal (bad name or scope,
    a run already holding the workspace) or Kafka or Postgres out of reach is one line (`_plainly`)."""
    from services.rederivation.rederive import ProjectorBehind, check_scope

    async def checked() -> T:
        await check_scope(settings, scope)
        return await start()

    try:
        with _plainly():
            return asyncio.run(checked())
    except ProjectorBehind as err:
        raise _fail(str(err)) from None


@app.command()
def rederive(
    name: str = typer.Option(..., "--name", help="the new derivation's name ([A-Za-z0-9_-], ≤ 64)"),
    workspace: str = typer.Option(..., "--workspace", "-w"),
    pair: str = typer.Option("", "--pair", help="OBSERVER/OBSERVED; default: every pair of the workspace"),
    model: str = typer.Option("", "--model", help="the chat model; default: the deriver's"),
) -> None:
    """Re-run the deriver over the recorded perceptions into a separate, named derivation (nothing current changes)."""
    from services.rederivation.rederive import DerivationScope, check_name
    from services.rederivation.rederive import rederive as run

    observer, observed = _pair_option(pair)
    with _plainly():
        check_name(name)  # before anything is reached
    settings, scope = _settings(), DerivationScope(workspace, observer, observed)
    report = _run_derivation(settings, scope, lambda: run(settings, name, scope, model))
    typer.echo(
        f"{report.name}: {report.pairs} pairs, {report.messages} messages, {report.batches} batches, "
        f"{report.events} events, {report.skipped} messages already there"
    )
    _parked([report])


@app.command()
def reembed(
    model: str = typer.Option(
        ..., "--model", help="the embedding model to embed with (PEERLOG_EMBEDDING_* for the rest)"
    ),
    workspace: str = typer.Option(..., "--workspace", "-w"),
) -> None:
    """Embed every message and observation of a workspace again with MODEL, as new events on the log,
    skipping what MODEL embedded already (so a stopped run resumes where it left off); one run per workspace
    and model at a time. Reads keep the active model until the setting names MODEL and the projections are
    rebuilt (see the README)."""
    from services.llm.errors import EmbeddingError

    settings = _settings()
    _set_up(settings)
    try:
        with _plainly():
            total, appended = asyncio.run(_reembed(settings, model, workspace))
    except EmbeddingError as err:
        raise _fail(str(err)) from None
    typer.echo(f"{workspace}: {appended} vectors appended with {model}")
    if total > appended:  # a run that returns went through its whole plan: what is missing was refused
        raise _fail(
            f"{model} refuses {total - appended} text(s) for good (logged with their length); they stay without "
            "a vector of it: full-text search finds them, and a rebuild asks --accept-missing-vectors"
        )


async def _reembed(settings: Settings, model: str, workspace: str) -> tuple[int, int]:
    """Reembed `workspace` with `model` once it exists, holding the lock of both: (vectors planned, appended)."""
    from projections.run_lock import reembedding
    from services.rederivation.rederive import DerivationScope, check_scope

    await check_scope(settings, DerivationScope(workspace))
    # held from the plan to the last append: a second run planned meanwhile would append the same vectors
    async with reembedding(settings, workspace, model) as lock:
        return await _reembed_locked(settings, model, workspace, lock)


async def _reembed_locked(settings: Settings, model: str, workspace: str, lock) -> tuple[int, int]:
    from rich.progress import Progress

    from services.bus.producer import EventLog
    from services.embedder.reembed import reembed as run
    from services.embedder.reembed import scan
    from services.llm.embeddings import make_embedder

    embedder = make_embedder(settings.embedding.model_copy(update={"model": model}))
    the_plan = await asyncio.to_thread(scan, settings, workspace, model)
    log = EventLog(settings.kafka, client_id="peerlog-reembed")
    log.start()
    try:
        with Progress() as bar:
            task = bar.add_task(f"reembed {workspace} with {model}", total=the_plan.size())
            done = await run(the_plan, embedder, lock.guarded(log.append), lambda n: bar.advance(task, n))
    finally:
        log.close()
    return the_plan.size(), done


@derivations.command("promote")
def derivations_promote(
    name: str = typer.Argument(..., help="the derivation to make current; 'original' goes back to the first one"),
    workspace: str = typer.Option(..., "--workspace", "-w"),
    pair: str = typer.Option("", "--pair", help="OBSERVER/OBSERVED"),
    all_pairs: bool = typer.Option(False, "--all-pairs", help="every pair the workspace has perceived so far"),
    model: str = typer.Option("", "--model", help="the chat model for the catch-up; default: the deriver's"),
    reason: str = typer.Option("", "--reason", help="why, kept on the DerivationPromoted event"),
    from_scratch: bool = typer.Option(
        False, "--from-scratch", help="promote a derivation that holds nothing yet, deriving the whole history"
    ),
) -> None:
    """Make a derivation the current one (reads and the live deriver follow it); derive what it lacks first."""
    from services.rederivation.promote import check_promotable, promote
    from services.rederivation.rederive import DerivationScope

    if bool(pair) == all_pairs:
        raise typer.BadParameter("give either --pair OBSERVER/OBSERVED or --all-pairs")
    observer, observed = _pair_option(pair)
    with _plainly():
        check_promotable(name)  # before anything is reached
    settings, scope = _settings(), DerivationScope(workspace, observer, observed)
    # a promotion is permanent: none for a workspace or pair that does not exist (_run_derivation)
    report = _run_derivation(
        settings, scope, lambda: promote(settings, name, scope, model, reason, from_scratch=from_scratch)
    )
    typer.echo(
        f"{report.name} is current for {report.pairs} pairs: {report.messages} messages caught up in "
        f"{report.batches} batches, {report.skipped} already there or left to the live deriver; "
        f"consistency token {report.consistency_token}"
    )
    _parked([report])


@derivations.command("retry")
def derivations_retry(
    workspace: str = typer.Option(..., "--workspace", "-w"),
    pair: str = typer.Option("", "--pair", help="OBSERVER/OBSERVED; default: every pair of the workspace"),
    model: str = typer.Option("", "--model", help="the chat model; default: the deriver's"),
) -> None:
    """Derive again the batches the live deriver dead-lettered, into each pair's current derivation; without
    --pair, also ask the summarizer (through the log) to try its dead-lettered summaries again."""
    from services.rederivation.rederive import DerivationScope
    from services.rederivation.retry import retry
    from services.summarizer.retry import retry_summaries

    observer, observed = _pair_option(pair)
    settings, scope = _settings(), DerivationScope(workspace, observer, observed)
    reports = _run_derivation(settings, scope, lambda: retry(settings, scope, model))
    for report in reports:
        typer.echo(
            f"{report.name}: {report.messages} messages derived in {report.batches} batches over "
            f"{report.pairs} pairs; consistency token {report.consistency_token}"
        )
    if not pair:  # summaries belong to sessions, not to pairs
        with _plainly():
            summaries = asyncio.run(retry_summaries(settings, workspace))
        typer.echo(
            f"summaries: {len(summaries.sessions)} sessions asked to try again; "
            f"consistency token {summaries.consistency_token}"
        )
    _parked(reports)


@derivations.command("compare")
def derivations_compare(
    name: str = typer.Option(..., "--name"),
    workspace: str = typer.Option(..., "--workspace", "-w"),
    pair: str = typer.Option(..., "--pair", help="OBSERVER/OBSERVED"),
    base: str = typer.Option("", "--base", help="the derivation on the left ('original', a name); default: current"),
    address: str = typer.Option("", help="the API's host:port; default: PEERLOG_API_HOST/PORT"),
) -> None:
    """Print a pair's current observations (or --base's) beside those of a named derivation.
    Sends PEERLOG_AUTH_TOKEN."""
    import grpc
    from rich.console import Console

    from services.cli.derivations import comparison

    settings = _settings()
    observer, observed = _pair_option(pair)
    at, token, tls = _address(settings, address), settings.auth.token.get_secret_value(), _tls(settings)
    try:
        for option, named in (("--name", name), ("--base", base)):
            if named and not _holds_observations(at, token, workspace, observer, observed, named, tls):
                raise _fail(
                    f"derivation {named!r} holds no observations of ({observer}, {observed}) in workspace "
                    f"{workspace!r}; check {option} and --pair (`peerlog rederive` makes one)"
                )
        table = comparison(at, workspace, observer, observed, name, base, token, tls)
    except grpc.RpcError as err:
        raise _fail(f"{err.code().name}: {err.details()} (the API at {at}); {_rpc_hint(err.code().name)}") from None
    Console().print(table)


def _tls(settings: Settings):
    """The CLI's own calls' TLS credentials (PEERLOG_AUTH_TLS_CA), None for a plain connection."""
    from services.api.channels import tls_to

    try:
        return tls_to(settings.auth.tls_ca)
    except OSError as err:
        raise _fail(f"cannot read PEERLOG_AUTH_TLS_CA ({err.strerror}: {settings.auth.tls_ca})") from None


def _rpc_hint(code: str) -> str:
    """What to check for an RPC's failure, by its status code's name."""
    if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
        return (
            "check that the API runs and --address (default PEERLOG_API_HOST/PORT), and for an API serving TLS, "
            "PEERLOG_AUTH_TLS_CA"
        )
    if code in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
        return "check PEERLOG_AUTH_TOKEN (`peerlog keys create`)"
    return "check -w, --pair and --name"


def _holds_observations(
    address: str, token: str, workspace: str, observer: str, observed: str, name: str, credentials=None
) -> bool:
    """Whether derivation `name` has any observation of the pair of its own: the API lists a name it never
    saw with what clients wrote alone (derivation "*", in every derivation)."""
    from peerlog.v1 import observations_pb2
    from services.api.channels import channel
    from services.cli.client import Client
    from services.events import stored_derivation

    page_token = ""
    with channel(address, token, credentials=credentials) as chan:
        while True:
            listed = Client(chan).observations.ListObservations(
                observations_pb2.ListObservationsRequest(
                    workspace_id=workspace,
                    observer_id=observer,
                    observed_id=observed,
                    derivation=name,
                    include_superseded=True,
                    include_deleted=True,
                    page={"page_size": 100, "page_token": page_token},
                )
            )
            if any(o.derivation == stored_derivation(name) for o in listed.observations):
                return True
            page_token = listed.next_page_token
            if not page_token:
                return False


@projector.command("run")
def projector_run() -> None:
    """Project the log into Postgres until SIGTERM."""
    import signal

    settings = _service_settings()
    from projections import metrics
    from projections.projector import Projector
    from services import tracing

    _set_up(settings)
    tracing.setup(settings.tracing, "peerlog-projector")
    p = Projector(settings)
    metrics.serve(settings.projector, p.engine)
    signal.signal(signal.SIGTERM, lambda *_: p.stop())
    p.run()


@topics.command("create")
def topics_create() -> None:
    """Create every peerlog topic that is missing (safe to repeat)."""
    from services.bus.admin import create_topics

    with _plainly():
        created = create_topics(_settings().kafka)
    for name, outcome in created.items():
        typer.echo(f"{name}: {outcome}")


@topics.command("abort-open")
def topics_abort_open(
    topic: str = typer.Argument(
        ..., help="full topic name, e.g. peerlog.processors-deriver-state or __consumer_offsets"
    ),
    partition: int = typer.Argument(None, min=0, help="one partition (default: every partition with one open)"),
    min_age_s: float = typer.Option(
        None, help="abort only a transaction at least this old (default: the transaction timeout + 30 s)"
    ),
) -> None:
    """Abort a transaction the broker left open (a hanging transaction), which holds every reader of its
    partition: a runner logs "a transaction stayed open on TOPIC [P]" for a changelog, or "the assigned
    partitions' offsets did not become stable" for its input offsets (then give `__consumer_offsets`)."""
    from services.cli.transactions import CommandFailed, Outcome, abort_open, abort_open_anywhere

    kafka = _settings().kafka
    age = kafka.transaction_timeout_ms / 1000 + 30 if min_age_s is None else min_age_s
    with _plainly():
        try:
            if partition is None:
                outcomes = abort_open_anywhere(kafka, topic, age) or [
                    Outcome(True, f"no transaction is open on {topic}")
                ]
            else:
                outcomes = [abort_open(kafka, topic, partition, age)]
        except CommandFailed as err:  # no java where the CLI runs (the image has none), or the command failed
            raise _fail(str(err)) from None
    for outcome in outcomes:
        typer.echo(outcome.message)
    if not all(o.ok for o in outcomes):
        raise typer.Exit(1)


@projections.command("rebuild")
def projections_rebuild(
    accept_differences: bool = typer.Option(False, help="switch even if the rebuilt tables differ from the live ones"),
    accept_missing_vectors: bool = typer.Option(
        False,
        help="switch even if rows that have a vector now would have none of PEERLOG_EMBEDDING_MODEL "
        "(after a change of model: run `peerlog reembed` instead)",
    ),
) -> None:
    """Replay the log from offset 0 into a fresh schema (or carry on the build of a rebuild that died),
    verify it, and switch reads to it. Waits while Postgres or Kafka is away; stops on any other error."""
    from sqlalchemy.exc import DBAPIError

    from projections.outages import database_error_line
    from projections.rebuild import rebuild
    from projections.rebuild_schemas import RebuildInProgress

    collector.tune()
    try:
        report = rebuild(
            _settings(),
            progress=typer.echo,
            accept_differences=accept_differences,
            accept_missing_vectors=accept_missing_vectors,
        )
    except (RebuildInProgress, LookupError) as err:  # another rebuild; no topics or live schema to rebuild from
        raise _fail(str(err)) from None
    except DBAPIError as err:  # waiting would not help: a statement timeout, a refusal of the work
        raise _fail(
            f"Postgres refused the rebuild's work ({database_error_line(err)}); see its log, fix the cause "
            "and run the rebuild again: it carries on its build from the recorded offsets"
        ) from None
    if not report.switched:
        raise typer.Exit(1)


@contextmanager
def _serving_engine() -> Iterator[tuple[Engine, str]]:
    """An engine on the configured database, and the name of the schema reads are served from."""
    from projections.db import sync_engine

    database = _settings().database
    engine = sync_engine(database)
    try:
        yield engine, database.schema_name
    finally:
        engine.dispose()


@projections.command("schemas")
def projections_schemas() -> None:
    """List the schemas rebuilds left beside the live one: retired, kept for inspection, builds."""
    from projections.rebuild_schemas import side_schemas

    with _plainly(), _serving_engine() as (engine, live), engine.connect() as conn:
        found = side_schemas(conn, live)
    typer.echo(f"live\t{live}")
    for schema in found:
        typer.echo(f"{schema.kind}\t{schema.name}\t{schema.bytes / 2**20:.1f} MiB")


@projections.command("drop")
def projections_drop(schema: str = typer.Argument(..., help="a retired, kept or build schema's name")) -> None:
    """Drop a schema a rebuild left (never the live one, nor a build in progress)."""
    from projections.rebuild_schemas import RebuildInProgress, drop_side_schema

    with _plainly(), _serving_engine() as (engine, live):
        try:
            dropped = drop_side_schema(engine, live, schema)
        except RebuildInProgress as err:
            raise _fail(str(err)) from None
    typer.echo(f"dropped {dropped.kind} schema {dropped.name} ({dropped.bytes / 2**20:.1f} MiB)")


@keys.command("create")
def keys_create(
    workspace: str = typer.Option("", "--workspace", "-w", help="only this workspace; without it: admin"),
    peer: str = typer.Option("", "--peer", help="only as this peer of --workspace (peer:W/P)"),
    session: str = typer.Option("", "--session", help="only this session of --workspace (session:W/S)"),
    expires: str = typer.Option("", "--expires", help="lifetime such as 30d, 12h, 90m; default: none"),
) -> None:
    """Print a token signed with PEERLOG_AUTH_SECRET (HS256) or PEERLOG_AUTH_PRIVATE_KEY_FILE (RS256/ES256).

    --peer and --session together grant both scopes."""
    from services.api.tokens import mint, parse_duration, scopes_for
    from services.errors import Unauthenticated

    try:
        scopes = scopes_for(workspace, peer, session)
        token = mint(_settings().auth, scopes, parse_duration(expires) if expires else None)
    except (ValueError, Unauthenticated) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(token)


@dev.command("up")
def dev_up(root: Path = DEV_DIR) -> None:
    """Start the local stack in the background; print the settings that reach it, with an admin token."""
    from infra.stack import up

    state = up(root, progress=typer.echo)
    typer.echo(
        "\nTo point the CLI and clients at it (PEERLOG_AUTH_TOKEN is an admin token; "
        "`peerlog keys create` makes narrower ones):"
    )
    for k, v in state.env().items():
        typer.echo(f"  export {k}='{v}'")


@dev.command("down")
def dev_down(root: Path = DEV_DIR) -> None:
    """Stop the local stack (its data stays)."""
    from infra.stack import down

    down(root, progress=typer.echo)


@app.command()
def demo(root: Path = typer.Option(Path(".peerlog/demo"), "--dir")) -> None:
    """Start the stack, run a scripted conversation through the API, print it back, stop."""
    from services.cli.demo import run_demo

    run_demo(root)


@app.command("mcp")
def mcp_stdio() -> None:
    """Serve the agent memory tools (peerlog_profile, _search, _context, _reasoning, _conclude) to an MCP
    client over stdio; settings as peerlog-memory's (PEERLOG_TARGET, PEERLOG_TOKEN, memory.json)."""
    from peerlog_client.memory.config import ConfigError, load_config

    try:
        config = load_config()
    except ConfigError as error:  # an MCP client shows a traceback as "the server failed to start"
        typer.echo(f"peerlog mcp: {error}", err=True)
        raise typer.Exit(2) from None
    from peerlog_client.memory.mcp_server import serve

    serve(config)


if __name__ == "__main__":
    app()
