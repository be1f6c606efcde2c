"""A change of embedding model: `peerlog reembed` appends the new model's vectors without touching live
reads, a second run appends nothing, one with the live model appends nothing either, two runs with one
model exclude each other, and a rebuild under the new setting switches every vector without calling a
model, but not while a row would lose the vector it has."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from sqlalchemy import select

from projections.db import async_engine, sync_engine
from projections.run_lock import RunInProgress, reembedding
from projections.schema import messages, observations
from projections.vector_model_reads import vectors_of_other_models
from services.cli.client import Client
from services.cli.main import _reembed
from services.embedder.policy import previous_turn, text_to_embed
from services.events import MessageAppended
from services.llm.embeddings import LOCAL_MODEL, MINILM, LocalOnnxEmbedder
from tests.integration.test_projector import P
from tests.support.processes import settings_env
from tests.support.wait import eventually


def rows(settings, table, *columns):
    engine = sync_engine(settings.database)
    try:
        with engine.connect() as conn:
            return conn.execute(
                select(*(table.c[c] for c in columns)).order_by(*(table.c[c] for c in columns[:2]))
            ).all()
    finally:
        engine.dispose()


def context_texts(settings) -> dict[str, str]:
    """Each message's text as the embedder embeds it (date, author, previous turn)."""
    out, before = {}, None
    for r in rows(settings, messages, "seq", "message_id", "peer_id", "content", "created_at"):
        event = MessageAppended(
            workspace_id="w",
            session_id="s",
            message_id=r.message_id,
            peer_id=r.peer_id,
            content=r.content,
            created_at=r.created_at,
            producer=P,
        )
        out[r.message_id], before = text_to_embed(event, before), previous_turn(event)
    return out


async def test_reembed_then_a_rebuild_under_the_new_setting_switches_every_vector(channel, settings, start_worker):
    worker = start_worker("embedder")
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.add("w", "s", [("alice", "I adopted a greyhound"), ("bob", "What is its name?"), ("alice", "Comet")])
    await c.create_observations("w", "alice", "alice", ["Alice has a greyhound", "Alice's dog is named Comet"])
    eventually(
        lambda: all(
            r.embedding_model == LOCAL_MODEL for r in rows(settings, messages, "seq", "message_id", "embedding_model")
        ),
        60,
    )

    assert await _reembed(settings, MINILM, "w") == (5, 5)
    assert await _reembed(settings, MINILM, "w") == (0, 0)  # resumes: nothing left, nothing doubled
    # live reads keep the active model: the projector keeps only its vectors
    assert {r.embedding_model for r in rows(settings, messages, "seq", "message_id", "embedding_model")} == {
        LOCAL_MODEL
    }
    assert {
        r.embedding_model for r in rows(settings, observations, "observation_id", "content", "embedding_model")
    } == {LOCAL_MODEL}

    worker.stop()  # nothing that embeds runs: the switch can only replay what the log holds
    env = {**os.environ, **settings_env(settings), "PEERLOG_EMBEDDING_MODEL": MINILM}
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "projections", "rebuild", "--accept-differences"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    other = LocalOnnxEmbedder(model=MINILM)
    texts = context_texts(settings)
    for r in rows(settings, messages, "seq", "message_id", "embedding_model", "embedding"):
        assert r.embedding_model == MINILM
        np.testing.assert_allclose(r.embedding, other.embed_sync([texts[r.message_id]])[0], atol=1e-5)
    for r in rows(settings, observations, "observation_id", "content", "embedding_model", "embedding"):
        assert r.embedding_model == MINILM
        np.testing.assert_allclose(r.embedding, other.embed_sync([r.content])[0], atol=1e-5)
    # a deployment still on the old setting is told which vectors its searches cannot see
    engine = async_engine(settings.database)
    try:
        async with engine.connect() as conn:
            assert await vectors_of_other_models(conn, LOCAL_MODEL) == {MINILM: 5}
            assert await vectors_of_other_models(conn, MINILM) == {}
    finally:
        await engine.dispose()


async def embedded_by_the_live_model(channel, settings, start_worker):
    """Workspace w with three messages and two observations, all embedded with the live model; the worker."""
    worker = start_worker("embedder")
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.add("w", "s", [("alice", "I adopted a greyhound"), ("bob", "What is its name?"), ("alice", "Comet")])
    await c.create_observations("w", "alice", "alice", ["Alice has a greyhound", "Alice's dog is named Comet"])
    eventually(
        lambda: (
            [r.embedding_model for r in rows(settings, messages, "seq", "message_id", "embedding_model")]
            == [LOCAL_MODEL] * 3
        ),
        60,
    )
    return c, worker


async def test_reembed_with_the_live_model_appends_nothing_the_embedder_or_the_observations_hold_and_runs_once(
    channel, settings, start_worker
):
    await embedded_by_the_live_model(channel, settings, start_worker)
    async with reembedding(settings, "w", MINILM):  # a run with another model holds its own lock
        assert await _reembed(settings, LOCAL_MODEL, "w") == (0, 0)
        with pytest.raises(RunInProgress, match=f"another reembed of workspace 'w' with {MINILM}"):
            await _reembed(settings, MINILM, "w")  # before, both appended every vector
    assert await _reembed(settings, MINILM, "w") == (5, 5)


def rebuild_under(settings, model: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **settings_env(settings), "PEERLOG_EMBEDDING_MODEL": model}
    command = [sys.executable, "-m", "services.cli.main", "projections", "rebuild", "--accept-differences"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


async def test_a_rebuild_under_a_new_model_does_not_switch_while_a_row_would_lose_its_vector(
    channel, settings, start_worker
):
    c, worker = await embedded_by_the_live_model(channel, settings, start_worker)
    assert await _reembed(settings, MINILM, "w") == (5, 5)
    await c.add("w", "s", [("bob", "A message after the reembed")])  # embedded with the live model only
    eventually(lambda: len([r for r in rows(settings, messages, "seq", "embedding_model") if r[1]]) == 4, 60)
    worker.stop()

    refused = rebuild_under(settings, MINILM)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "not switching: rows that have a vector in the live schema have none of" in refused.stdout
    assert "(messages: 1)" in refused.stdout, refused.stdout
    assert {r.embedding_model for r in rows(settings, messages, "seq", "embedding_model")} == {LOCAL_MODEL}

    assert await _reembed(settings, MINILM, "w") == (1, 1)  # what the README says to do: reembed again
    switched = rebuild_under(settings, MINILM)
    assert switched.returncode == 0, switched.stdout + switched.stderr
    assert "resuming" in switched.stdout  # the build the refused rebuild left, carried on
    assert {r.embedding_model for r in rows(settings, messages, "seq", "embedding_model")} == {MINILM}


async def test_an_observation_the_api_embedded_with_the_old_model_mid_switch_gets_a_vector_from_a_last_reembed(
    channel, settings, monkeypatch
):
    from projections import handlers, observation_handlers

    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.create_observations("w", "alice", "alice", ["Alice has a greyhound"])
    eventually(lambda: len(rows(settings, observations, "observation_id")) == 1, 60)
    assert await _reembed(settings, MINILM, "w") == (1, 1)  # step 1
    for module in (handlers, observation_handlers):  # step 2: the projector runs with the new setting
        monkeypatch.setattr(module, "ACTIVE_EMBEDDING_MODEL", MINILM)
    assert await _reembed(settings, MINILM, "w") == (0, 0)  # step 3
    # the API, on the old setting until step 5, embeds this one with the old model: the projector keeps no vector
    await c.create_observations("w", "alice", "alice", ["Alice walks Comet every morning"])
    eventually(lambda: len(rows(settings, observations, "observation_id")) == 2, 60)

    switched = rebuild_under(settings, MINILM)  # step 4
    assert switched.returncode == 0, switched.stdout + switched.stderr
    assert "without a vector of all-MiniLM-L6-v2" in switched.stdout and "gives them one" in switched.stdout
    assert await _reembed(settings, MINILM, "w") == (1, 1)  # step 6: the one the API embedded mid-switch
    eventually(
        lambda: (
            {r.embedding_model for r in rows(settings, observations, "observation_id", "embedding_model")} == {MINILM}
        ),
        60,
    )
