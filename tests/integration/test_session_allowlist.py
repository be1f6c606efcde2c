"""A session allowlist keeps derived knowledge whose whole premise closure comes from allowed sessions.

Derived observations are written to the log as the dreamer writes them (ObservationAdded with
premise ids), so the test covers the projection of premise edges as well as the read rule.
"""

from __future__ import annotations

import pytest

from peerlog.v1 import context_pb2, context_pb2_grpc, observations_pb2
from services.cli.client import Client
from services.events import Level
from tests.support.observations import append, derived


@pytest.fixture
async def store(channel, settings):
    """Explicit: oslo (s1), bees (s2). Derived: norway ← oslo; scandinavia ← norway; bees_in_norway ←
    oslo + bees; beekeeper pattern ← bees + bees_in_norway; orphan cites a premise the store lacks."""
    c = Client(channel)
    await c.setup_conversation("w", "s1")
    await c.session("w", "s2", members=("alice", "bob"))
    made = await c.create_observations(
        "w",
        "alice",
        "bob",
        [
            observations_pb2.NewObservation(content="Bob lives in Oslo", session_id="s1"),
            observations_pb2.NewObservation(content="Bob keeps bees", session_id="s2"),
        ],
    )
    oslo, bees = made.observation_ids
    token = append(
        settings,
        [
            derived("norway", Level.DEDUCTIVE, "Bob lives in Norway", [oslo]),
            derived("scandinavia", Level.DEDUCTIVE, "Bob lives in Scandinavia", ["norway"]),
            derived("bees_in_norway", Level.DEDUCTIVE, "Bob keeps bees in Norway", [oslo, bees]),
            derived(
                "beekeeper",
                Level.INDUCTIVE,
                "Bob tends to keep up his hobbies wherever he lives",
                [bees, "bees_in_norway"],
                confidence="low",
                pattern_type="tendency",
            ),
            derived("orphan", Level.DEDUCTIVE, "Bob likes fjords", ["not-in-the-store"]),
        ],
    )
    return {"oslo": oslo, "bees": bees}, token


async def representation(channel, token: str, sessions=()) -> context_pb2.GetRepresentationResponse:
    return await context_pb2_grpc.ContextServiceStub(channel).GetRepresentation(
        context_pb2.GetRepresentationRequest(
            workspace_id="w",
            observer_id="alice",
            target_id="bob",
            session_ids=list(sessions),
            consistency={"consistency_token": token},
        )
    )


async def test_without_an_allowlist_every_observation_the_store_accepted_is_served(channel, store):
    _, token = store
    out = await representation(channel, token)
    # the orphan never entered the store: its premise does not exist (the provenance rule)
    assert len(out.observations) == 6 and "orphan" not in {o.observation_id for o in out.observations}


async def test_a_derived_observation_is_served_when_its_whole_closure_is_from_allowed_sessions(channel, store):
    ids, token = store
    out = await representation(channel, token, ["s1"])
    # scandinavia rests on norway, which rests on oslo (s1): kept two levels up
    assert [o.observation_id for o in out.observations] == [ids["oslo"], "norway", "scandinavia"]


async def test_one_premise_from_another_session_withholds_the_conclusion_and_everything_above_it(channel, store):
    ids, token = store
    out = await representation(channel, token, ["s2"])
    assert [o.observation_id for o in out.observations] == [ids["bees"]]  # bees_in_norway and beekeeper need s1


async def test_allowing_every_session_serves_everything(channel, store):
    _, token = store
    out = await representation(channel, token, ["s1", "s2"])
    assert len(out.observations) == 6


async def test_get_context_applies_the_allowlist_to_its_representation(channel, store):
    ids, token = store
    out = await context_pb2_grpc.ContextServiceStub(channel).GetContext(
        context_pb2.GetContextRequest(
            workspace_id="w",
            session_id="s1",
            observer_id="alice",
            target_id="bob",
            session_ids=["s1"],
            consistency={"consistency_token": token},
        )
    )
    assert {o.observation_id for o in out.observations} == {ids["oslo"], "norway", "scandinavia"}


async def test_the_markdown_shows_premises_of_deductions_and_the_pattern_of_inductions(channel, store):
    ids, token = store
    out = await representation(channel, token)
    assert "## Deductive\n" in out.markdown and "- Bob lives in Norway\n  - premise: Bob lives in Oslo" in out.markdown
    assert (
        "- Bob tends to keep up his hobbies wherever he lives (tendency; confidence low)\n"
        "  - source: Bob keeps bees\n  - source: Bob keeps bees in Norway"
    ) in out.markdown
    pattern = next(o for o in out.observations if o.observation_id == "beekeeper")
    assert (pattern.confidence, pattern.pattern_type) == ("low", "tendency")
    assert [p.observation_id for p in pattern.premises] == [ids["bees"], "bees_in_norway"]


async def test_an_allowlisted_session_that_does_not_exist_is_not_found(channel, store):
    import grpc

    _, token = store
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await representation(channel, token, ["s1", "nope"])
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "nope" in err.value.details()
