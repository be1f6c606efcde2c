"""`make demo`: a real local model, the local stack, a scripted conversation, and what peerlog made of it."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import typer

from peerlog.v1 import common_pb2, messages_pb2, observations_pb2, sessions_pb2
from services.api.channels import aio_channel
from services.cli.client import Client
from services.cli.demo_agent import agent_env, run_agent_turns
from services.cli.demo_dream import show_dream
from services.cli.demo_reads import show_chat, show_context

SCRIPT = [
    ("alice", "Hi! I'm planning a trip to Lisbon in May with my sister Maya."),
    ("assistant", "Lovely. How long will you stay, and what do you enjoy doing when you travel?"),
    ("alice", "Five days. I love old bookshops and I don't eat meat, so food tips should be vegetarian."),
    ("assistant", "Noted: vegetarian. Livraria Bertrand in Chiado is the oldest bookshop still open."),
    ("alice", "Perfect. Maya is afraid of heights, so skip anything like the Santa Justa lift."),
    ("assistant", "Understood. The tram 28 route gives views without heights."),
    ("alice", "Great. Also, I work remotely as a data engineer, so I need decent wifi."),
]
WS, SESSION = "demo", "lisbon-trip"
# the demo shows memory forming within a minute or two, so it batches and summarises sooner than the defaults
DEMO_SETTINGS = {
    "PEERLOG_DERIVER_BATCH_TOKENS": "48",
    "PEERLOG_DERIVER_MAX_WAIT_S": "20",
    "PEERLOG_DERIVER_TICK_S": "2",
    "PEERLOG_SUMMARIZER_SHORT_EVERY": "7",
    # a 0.5B model on two cores takes ~10 s a call: keep the dream's tool loops short
    "PEERLOG_DREAM_DEDUCTION_ROUNDS": "4",
    "PEERLOG_DREAM_INDUCTION_ROUNDS": "4",
    # greedy decoding repeats a refused call word for word; sampling lets a refusal change the next try
    "PEERLOG_LLM_DEDUCTION_TEMPERATURE": "0.7",
    "PEERLOG_LLM_INDUCTION_TEMPERATURE": "0.7",
    "PEERLOG_DIALECTIC_DEADLINE_S": "600",
}


def say(line: str = "") -> None:
    typer.echo(line)


# what the assistant app itself is sure of, written with CreateObservations (verbatim spans are checked):
# the dream and Chat then have premises even when the small model's own extraction is thin
KNOWN = [
    (2, "Alice does not eat meat", "I don't eat meat"),
    (2, "Alice loves old bookshops", "I love old bookshops"),
    (4, "Alice's sister Maya is afraid of heights", "Maya is afraid of heights"),
    (0, "Alice is travelling to Lisbon in May with her sister Maya", "a trip to Lisbon in May with my sister Maya"),
    (6, "Alice works remotely as a data engineer", "I work remotely as a data engineer"),
    (6, "Alice needs decent wifi", "I need decent wifi"),
]


async def record_known(api: Client, message_ids: list[str]) -> None:
    made = await api.observations.CreateObservations(
        observations_pb2.CreateObservationsRequest(
            workspace_id=WS,
            observer_id="assistant",
            observed_id="alice",
            observations=[
                observations_pb2.NewObservation(
                    content=text,
                    session_id=SESSION,
                    sources=[observations_pb2.ObservationSource(message_id=message_ids[i], span=span)],
                )
                for i, text, span in KNOWN
            ],
        )
    )
    await api.observations.ListObservations(
        observations_pb2.ListObservationsRequest(
            workspace_id=WS,
            observer_id="assistant",
            observed_id="alice",
            consistency=common_pb2.ReadConsistency(consistency_token=made.consistency_token),
        )
    )
    say(
        f"\nThe assistant app also recorded {len(made.observation_ids)} facts it is sure of (CreateObservations, "
        "each with a verbatim span the server checked)."
    )


async def converse(api: Client) -> list[str]:
    await api.workspace(WS)
    await api.peer(WS, "alice")
    await api.peer(WS, "assistant", observe_me=False)
    await api.session(
        WS,
        SESSION,
        members=[
            sessions_pb2.MemberSpec(peer_id="alice"),
            sessions_pb2.MemberSpec(peer_id="assistant", observe_others=True),
        ],
    )
    added = await api.add(WS, SESSION, SCRIPT)
    say(
        f"\nAddMessages: {len(added.message_ids)} messages acknowledged by the log "
        f"(consistency token {added.consistency_token})"
    )
    listed = await api.messages.ListMessages(
        messages_pb2.ListMessagesRequest(
            workspace_id=WS,
            session_id=SESSION,
            consistency=common_pb2.ReadConsistency(consistency_token=added.consistency_token),
        )
    )
    say("\nRead back from the projections:")
    for m in listed.messages:
        say(f"  #{m.seq:<2} {m.peer_id:>9}: {m.content}")
    return list(added.message_ids)


async def wait_for_memory(api: Client, timeout: float = 900) -> None:
    say("\nThe router, deriver and summarizer are at work (each model call takes a few seconds)…")
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        status = await api.observations.GetProcessingStatus(
            observations_pb2.GetProcessingStatusRequest(workspace_id=WS)
        )
        summaries = await api.sessions.GetSessionSummaries(
            sessions_pb2.GetSessionSummariesRequest(workspace_id=WS, session_id=SESSION)
        )
        c = status.counts
        now = (c.pending, c.in_flight, c.done, c.dead_lettered, summaries.HasField("short_summary"))
        if now != last:
            say(
                f"  pending {c.pending}, in flight {c.in_flight}, done {c.done}, dead-lettered {c.dead_lettered}"
                f"{', short summary ready' if now[4] else ''}"
            )
            last = now
        if c.done + c.dead_lettered > 0 and c.pending == c.in_flight == 0 and now[4]:
            return
        await asyncio.sleep(2)
    say("  (gave up waiting; showing what exists so far)")


async def show_memory(api: Client) -> None:
    for observer, observed in (("alice", "alice"), ("assistant", "alice")):
        listed = await api.observations.ListObservations(
            observations_pb2.ListObservationsRequest(workspace_id=WS, observer_id=observer, observed_id=observed)
        )
        say(f"\nWhat {observer} knows about {observed} ({len(listed.observations)} observations):")
        for o in listed.observations:
            span = o.sources[0].span if o.sources else ""
            say(f"  - {o.content}\n      source: “{span}”")
    status = await api.observations.GetProcessingStatus(observations_pb2.GetProcessingStatusRequest(workspace_id=WS))
    for batch in status.dead_lettered_batches:
        say(f"\nDead-lettered batch {batch.batch_id} ({batch.observer_id}→{batch.observed_id}): {batch.error[:200]}")
    summaries = await api.sessions.GetSessionSummaries(
        sessions_pb2.GetSessionSummariesRequest(workspace_id=WS, session_id=SESSION)
    )
    if summaries.HasField("short_summary"):
        say(
            f"\nShort summary of {SESSION!r} (covers {summaries.short_summary.messages_covered} messages, "
            f"model {summaries.short_summary.model}):\n  {summaries.short_summary.content}"
        )


def show_rejections(database_url: str) -> None:
    """What the grounding check refused: a small model often paraphrases where it must quote."""
    from sqlalchemy import create_engine, text

    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT content, reason FROM peerlog.rejected_observations "
                    "WHERE workspace_id = :w ORDER BY rejected_at LIMIT 5"
                ),
                {"w": WS},
            ).all()
    finally:
        engine.dispose()
    if rows:
        say(f"\nProposals the grounding check rejected (first {len(rows)}):")
        for content, reason in rows:
            say(f"  - {content}\n      {reason[:160]}")


async def run(port: int, database_url: str, token: str) -> None:
    async with aio_channel(f"127.0.0.1:{port}", token) as channel:
        api = Client(channel)
        message_ids = await converse(api)
        await wait_for_memory(api)
        await show_memory(api)
        await record_known(api, message_ids)
        show_rejections(database_url)
        await show_context(api, WS, SESSION, say)
        await show_chat(api, WS, SESSION, say)
        await show_dream(api, WS, say)


async def show_written(port: int, token: str) -> None:
    async with aio_channel(f"127.0.0.1:{port}", token) as channel:
        listed = await Client(channel).messages.ListMessages(
            messages_pb2.ListMessagesRequest(
                workspace_id=WS, session_id=SESSION, reverse=True, page=common_pb2.PageRequest(page_size=4)
            )
        )
    say(f"\nThe agent's turns, read back from peerlog (the last four messages of {SESSION!r}):")
    for m in reversed(listed.messages):
        say(f"  #{m.seq:<2} {m.peer_id:>9}: {m.content[:160]}")


@contextmanager
def model_endpoint(root: Path):
    """PEERLOG_LLM_* for the demo: the configured endpoint if there is one, else the local Qwen model."""
    if os.environ.get("PEERLOG_LLM_BASE_URL"):
        say(f"Using the model endpoint at {os.environ['PEERLOG_LLM_BASE_URL']}")
        yield {}
        return
    from infra.models.qwen import ModelDownloadError, ModelIntegrityError, ensure_model
    from infra.models.server import LlamaInstallError, LocalModelServer, ServerStartError, ensure_llama_server

    say("Preparing the local model (first run: ~6 min to build llama-cpp-python, then cached)…")
    try:
        path = ensure_model()
        ensure_llama_server()
        server = LocalModelServer(path, log_path=root / "model.log").start(timeout=300)
    except (ModelDownloadError, ModelIntegrityError, LlamaInstallError, ServerStartError) as error:
        say(
            f"The local model could not be installed or started, so the demo cannot run: {error}\n"
            "(set PEERLOG_LLM_BASE_URL and PEERLOG_LLM_MODEL to use another OpenAI-compatible endpoint)"
        )
        raise typer.Exit(1) from error
    say(f"  local model {server.model} serving at {server.base_url}")
    try:
        # this server takes a schema only as {"type": "json_object", "schema": ...}
        # and has no native tool calling: Chat and the dream specialists work through structured output
        yield {
            "PEERLOG_LLM_BASE_URL": server.base_url,
            "PEERLOG_LLM_MODEL": server.model,
            "PEERLOG_LLM_SCHEMA_MODE": "json_object_schema",
            "PEERLOG_LLM_TIMEOUT_S": "180",
            "PEERLOG_LLM_TOOL_MODE": "structured",
        }
    finally:
        server.stop()


def run_demo(root: Path) -> None:
    from infra.stack import down, up

    if root.exists():  # every demo starts from an empty log and store
        down(root, progress=lambda line: None)
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    with model_endpoint(root) as model_env:
        say("Starting the local stack (first run resolves Kafka's jars and may take a minute)…")
        state = up(root, progress=lambda line: say(f"  {line}"), model_env={**model_env, **DEMO_SETTINGS})
        try:
            asyncio.run(run(state.api_port, state.database_url, state.admin_token()))
            env = agent_env(root, state.api_port, state.admin_token(), WS, model_env)
            code = run_agent_turns(env, SESSION, say)
            if code:
                say(f"\nThe agent turns failed (examples/agent.py exited {code}).")
                raise typer.Exit(code)
            asyncio.run(show_written(state.api_port, state.admin_token()))
        finally:
            say("\nStopping the local stack…")
            down(root, progress=lambda line: say(f"  {line}"))
