"""The ObservationService and GetSessionSummaries: a pair's store read, searched, written and withdrawn
over gRPC, and how far memory formation has got."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from peerlog.v1 import observations_pb2 as o
from projections.schema import ENTRY_ID_BYTES
from services.bus.topics import OBSERVATIONS
from services.cli.client import Client
from services.events import ObservationAdded
from services.llm.embeddings import LOCAL_MODEL
from services.llm.tokens import count_tokens
from tests.integration.test_bad_input import quarantined
from tests.support.extractor import extract_each_turn
from tests.support.log import read_events
from tests.support.model_server import Reply
from tests.support.rpc import rejected
from tests.support.wait import until

EXPLICIT, DEDUCTIVE, INDUCTIVE = (
    o.OBSERVATION_LEVEL_EXPLICIT,
    o.OBSERVATION_LEVEL_DEDUCTIVE,
    o.OBSERVATION_LEVEL_INDUCTIVE,
)


def counts(status) -> tuple[int, int, int, int]:
    c = status.counts
    return c.pending, c.in_flight, c.done, c.dead_lettered


def source(message_id: str, span: str = "") -> o.ObservationSource:
    return o.ObservationSource(message_id=message_id, span=span)


@pytest.fixture
async def derived(channel, model_server, start_worker):
    """alice and bob talk in s1, alice alone in s2; the deriver has turned every turn into an observation."""
    model_server.reply_with(extract_each_turn)
    start_worker("router,deriver")
    c = Client(channel)
    await c.setup_conversation("w", "s1")
    await c.session("w", "s2", members=["alice"])
    cat = await c.add("w", "s1", [("alice", "I adopted a cat named Miso"), ("bob", "nice")])
    nurse = await c.add("w", "s2", [("alice", "I work night shifts as a nurse")])
    await until(lambda: c.all_observations("w", "alice", "alice"), lambda obs: len(obs) == 2)
    await until(lambda: c.all_observations("w", "bob", "bob"), lambda obs: len(obs) == 1)
    return c, {"cat": cat.message_ids[0], "nice": cat.message_ids[1], "nurse": nurse.message_ids[0]}


async def test_derived_observations_are_listed_per_pair_and_filtered_by_level_and_session(derived):
    c, _ = derived
    alice = await c.all_observations("w", "alice", "alice")
    # two sessions are two partitions: which turn the deriver saw first is not fixed
    assert {(x.content, x.session_id) for x in alice} == {
        ("The target said: I adopted a cat named Miso", "s1"),
        ("The target said: I work night shifts as a nurse", "s2"),
    }
    created = [(x.created_at.ToDatetime(), x.observation_id) for x in alice]
    assert created == sorted(created)
    assert {(x.observer_id, x.observed_id, x.level) for x in alice} == {("alice", "alice", EXPLICIT)}
    assert [x.content for x in await c.all_observations("w", "bob", "bob")] == ["The target said: nice"]
    assert await c.all_observations("w", "alice", "bob") == []  # observe_others is off by default

    in_s2 = await c.all_observations("w", "alice", "alice", session_id="s2")
    assert [x.content for x in in_s2] == ["The target said: I work night shifts as a nurse"]
    assert len(await c.all_observations("w", "alice", "alice", levels=[EXPLICIT])) == 2
    assert await c.all_observations("w", "alice", "alice", levels=[DEDUCTIVE, INDUCTIVE]) == []


async def test_observations_page_by_creation_time_in_either_direction(derived):
    c, _ = derived
    everything = await c.all_observations("w", "alice", "alice")
    first = await c.list_observations("w", "alice", "alice", page_size=1)
    assert list(first.observations) == everything[:1] and first.next_page_token
    assert await c.all_observations("w", "alice", "alice", page_size=1) == everything
    assert await c.all_observations("w", "alice", "alice", page_size=1, reverse=True) == everything[::-1]


async def test_a_page_token_read_with_an_as_of_not_yet_past_is_taken_once_that_time_has_passed(derived):
    # a client whose clock runs ahead pins its paging at its own "now": the first page reads as now, the
    # next one, sent after that time passed, as of it; the token of the first was refused as another list's
    from google.protobuf import timestamp_pb2

    c, _ = derived
    everything = await c.all_observations("w", "alice", "alice")
    ahead = timestamp_pb2.Timestamp()
    ahead.FromDatetime(datetime.now(UTC) + timedelta(seconds=1))
    first = await c.list_observations("w", "alice", "alice", page_size=1, as_of=ahead)
    await asyncio.sleep(1.5)
    second = await c.list_observations(
        "w", "alice", "alice", page_size=1, as_of=ahead, page_token=first.next_page_token
    )
    assert [*first.observations, *second.observations] == everything[:2]
    other = timestamp_pb2.Timestamp(seconds=ahead.seconds + 60)  # another list: its token is not this one's
    await rejected(
        c.list_observations("w", "alice", "alice", page_size=1, as_of=other, page_token=first.next_page_token),
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_token",
    )


async def test_get_observation_returns_its_sources(derived):
    c, sent = derived
    cat = next(x for x in await c.all_observations("w", "alice", "alice") if "Miso" in x.content)
    got = await c.get_observation("w", cat.observation_id)
    assert got == cat
    assert [(s.message_id, s.span) for s in got.sources] == [(sent["cat"], "I adopted a cat named Miso")]
    assert got.times_derived == 1 and got.premise_ids == [] and not got.HasField("deleted_at")
    await rejected(c.get_observation("w", "no-such-observation"), grpc.StatusCode.NOT_FOUND, "no-such-observation")


async def test_search_ranks_the_semantically_close_observation_first_and_honours_max_distance(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    made = await c.create_observations(
        "w",
        "alice",
        "bob",
        [
            "Bob plays the cello in a symphony orchestra",
            "Bob adopted a kitten and named it Miso",
            "Bob works night shifts as a nurse in Oslo",
        ],
    )
    await c.list_observations("w", "alice", "bob", token=made.consistency_token)

    found = await c.search_observations("w", "alice", "bob", "Which pet cat does Bob have?")
    assert found.embedding_model == LOCAL_MODEL
    assert found.results[0].observation.content == "Bob adopted a kitten and named it Miso"
    distances = [r.distance for r in found.results]
    assert len(distances) == 3 and distances == sorted(distances) and 0 <= distances[0] < distances[1] <= 2

    cutoff = (distances[0] + distances[1]) / 2
    near = await c.search_observations("w", "alice", "bob", "Which pet cat does Bob have?", max_distance=cutoff)
    assert [r.observation.content for r in near.results] == ["Bob adopted a kitten and named it Miso"]
    top1 = await c.search_observations("w", "alice", "bob", "Which pet cat does Bob have?", top_k=1)
    assert len(top1.results) == 1
    assert (await c.search_observations("w", "alice", "bob", "cat", levels=[DEDUCTIVE])).results == []
    assert (await c.search_observations("w", "bob", "alice", "cat")).results == []  # another pair's store


async def test_created_observations_are_explicit_carry_api_embeddings_and_are_readable_after_the_token(
    channel, settings
):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    sent = await c.add("w", "s", [("bob", "I live in Oslo, near the fjord")])
    # at once, with the write's token: the cited message is checked once it is readable (it was NOT_FOUND
    # whenever the projector had not projected it yet)
    made = await c.create_observations(
        "w",
        "alice",
        "bob",
        [
            o.NewObservation(
                content="Bob lives in Oslo", session_id="s", sources=[source(sent.message_ids[0], "i  LIVE in oslo")]
            ),
            "Bob prefers tea to coffee",
        ],
        token=sent.consistency_token,
    )
    assert len(made.observation_ids) == 2 and made.consistency_token

    listed = await c.all_observations("w", "alice", "bob", made.consistency_token)
    assert [x.observation_id for x in listed] == list(made.observation_ids)
    oslo, tea = listed
    assert (oslo.level, oslo.session_id, oslo.times_derived) == (EXPLICIT, "s", 1)
    assert [(s.message_id, s.span) for s in oslo.sources] == [(sent.message_ids[0], "i  LIVE in oslo")]
    assert (tea.session_id, list(tea.sources)) == ("", [])

    events = read_events(settings, OBSERVATIONS, lambda evs: len(evs) >= 2)
    assert [type(e) for e in events] == [ObservationAdded, ObservationAdded]
    assert {(e.producer.component, e.level.value, e.embedding_model, len(e.embedding)) for e in events} == {
        ("api", "explicit", LOCAL_MODEL, 384)
    }


async def test_the_longest_observation_the_api_accepts_is_projected_and_listed_and_nothing_is_quarantined(
    channel, settings
):
    # the longest ids an observation's index entry takes beside its vector (ENTRY_ID_BYTES, with the
    # generated observation id), and 2,000 incompressible four-byte characters: a btree over the raw
    # normalised content (8 KB) is over Postgres' 2,704-byte row limit, so the acknowledged event was quarantined
    rng = random.Random(17)
    content = "".join(chr(rng.randrange(0x20000, 0x2A6DF)) for _ in range(2_000))  # CJK extension B
    third = (ENTRY_ID_BYTES - 36) // 3
    workspace, alice, bob = (rng.randbytes(third).hex()[:third] for _ in range(3))  # random: incompressible
    c = Client(channel)
    await c.workspace(workspace)
    for peer in (alice, bob):
        await c.peer(workspace, peer)
    made = await c.create_observations(workspace, alice, bob, [content])
    assert len(made.observation_ids) == 1 and made.consistency_token

    listed = await c.all_observations(workspace, alice, bob, made.consistency_token)
    assert [(x.observation_id, x.content) for x in listed] == [(made.observation_ids[0], content)]
    assert quarantined(settings) == 0


async def test_ids_too_long_together_for_an_observations_index_entry_are_refused_before_anything_is_written(
    channel, settings
):
    # 512 random characters each: Postgres refuses the entry (3,176 bytes of 2,704), so the acknowledged
    # observation was parked in quarantine and never read
    rng = random.Random(5)
    workspace, alice, bob = (rng.randbytes(256).hex() for _ in range(3))
    c = Client(channel)
    await c.workspace(workspace)
    for peer in (alice, bob):
        await c.peer(workspace, peer)
    await rejected(
        c.create_observations(workspace, alice, bob, ["keeps bees"]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "take 1572 characters together",
        f"at most {ENTRY_ID_BYTES}",
    )
    assert quarantined(settings) == 0


async def test_bad_observations_are_rejected_and_nothing_is_written(channel, settings):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    sent = await c.add("w", "s", [("bob", "I live in Oslo")])
    await c.list_messages("w", "s", sent.consistency_token)
    oslo = sent.message_ids[0]

    def create(*items, observed="bob", workspace="w"):
        return c.create_observations(workspace, "alice", observed, items)

    await rejected(create(*["fact"] * 101), grpc.StatusCode.INVALID_ARGUMENT, "at most 100", "got 101")
    await rejected(create(), grpc.StatusCode.INVALID_ARGUMENT, "at least one")
    await rejected(
        create("fact", observed="carol"), grpc.StatusCode.NOT_FOUND, "observed_id 'carol'", "GetOrCreatePeer"
    )
    await rejected(create("fact", workspace="nowhere"), grpc.StatusCode.NOT_FOUND, "workspace 'nowhere'")
    await rejected(create("fine", "  \n "), grpc.StatusCode.INVALID_ARGUMENT, "observations[1].content is empty")
    await rejected(create("x" * 2001), grpc.StatusCode.INVALID_ARGUMENT, "2001 characters", "2000")
    await rejected(
        create(o.NewObservation(content="Bob likes Oslo", sources=[source(oslo, "I love Oslo")])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "observations[0].sources[0].span 'I love Oslo' is not in message",
    )
    await rejected(
        create("a valid one", o.NewObservation(content="Bob is a pilot", sources=[source(oslo, "I fly")])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "observations[1].sources[0].span",
    )
    await rejected(
        create(o.NewObservation(content="Bob says hi", sources=[source("nope")])),
        grpc.StatusCode.NOT_FOUND,
        "message 'nope'",
    )
    await rejected(
        create(o.NewObservation(content="Bob says hi", session_id="nope")), grpc.StatusCode.NOT_FOUND, "session 'nope'"
    )

    # alice was not in "elsewhere": (alice, bob) may not cite what bob said there
    await c.peer("w", "carol")
    await c.session("w", "elsewhere", members=["bob", "carol"])
    hidden = await c.add("w", "elsewhere", [("bob", "my pin is 1234")])
    await c.list_messages("w", "elsewhere", hidden.consistency_token)
    await rejected(
        create(o.NewObservation(content="Bob's pin is 1234", sources=[source(hidden.message_ids[0])])),
        grpc.StatusCode.NOT_FOUND,  # as for a message that does not exist: no oracle of other sessions' ids
        "could not see",
        "'alice'",
    )

    # an allowlist judges an explicit observation by its session: it may cite only that session's messages
    await c.session("w", "other", members=["alice", "bob"])
    seen = await c.add("w", "other", [("bob", "my bank PIN is 4321")])
    await c.list_messages("w", "other", seen.consistency_token)
    await rejected(
        create(o.NewObservation(content="Bob's PIN is 4321", session_id="s", sources=[source(seen.message_ids[0])])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "of session 'other', not of observations[0].session_id 's'",
    )

    sentinel = await create("the only one")
    listed = await c.all_observations("w", "alice", "bob", sentinel.consistency_token)
    assert [x.content for x in listed] == ["the only one"]
    events = read_events(settings, OBSERVATIONS, lambda evs: any(e.content == "the only one" for e in evs), settle=1)
    assert [e.content for e in events] == ["the only one"]


async def test_a_deleted_observation_leaves_lists_and_search_but_get_still_shows_it(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    made = await c.create_observations("w", "alice", "bob", ["Bob is vegetarian", "Bob likes jazz"])
    gone, kept = made.observation_ids
    await c.list_observations("w", "alice", "bob", made.consistency_token)

    deleted = await c.delete_observation("w", gone, reason="bob asked us to forget it")
    assert deleted.consistency_token
    assert [x.observation_id for x in await c.all_observations("w", "alice", "bob")] == [kept]
    everything = await c.all_observations("w", "alice", "bob", include_deleted=True)
    assert [x.observation_id for x in everything] == [gone, kept]
    got = await c.get_observation("w", gone)
    assert got.HasField("deleted_at") and got.delete_reason == "bob asked us to forget it"
    found = await c.search_observations("w", "alice", "bob", "Bob is vegetarian")
    assert [r.observation.observation_id for r in found.results] == [kept]

    await rejected(c.delete_observation("w", gone), grpc.StatusCode.FAILED_PRECONDITION, "already deleted")
    await rejected(c.delete_observation("w", "unknown"), grpc.StatusCode.NOT_FOUND, "'unknown'")


async def test_bad_reads_are_rejected_with_an_actionable_status(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await rejected(c.list_observations("w", "alice", ""), grpc.StatusCode.INVALID_ARGUMENT, "observed_id")
    await rejected(c.list_observations("w", "alice", "carol"), grpc.StatusCode.NOT_FOUND, "observed_id 'carol'")
    await rejected(
        c.list_observations("w", "alice", "bob", session_id="nope"), grpc.StatusCode.NOT_FOUND, "session 'nope'"
    )
    await rejected(
        c.list_observations("w", "alice", "bob", page_token="garbage!"), grpc.StatusCode.INVALID_ARGUMENT, "page_token"
    )
    await rejected(
        c.list_observations("w", "alice", "bob", levels=[99]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "not an ObservationLevel",
    )
    await rejected(c.search_observations("w", "alice", "bob", " "), grpc.StatusCode.INVALID_ARGUMENT, "query is empty")
    await rejected(
        c.search_observations("w", "alice", "bob", "cats", top_k=101), grpc.StatusCode.INVALID_ARGUMENT, "top_k 101"
    )
    await rejected(
        c.search_observations("w", "alice", "bob", "cats", max_distance=2.5),
        grpc.StatusCode.INVALID_ARGUMENT,
        "max_distance 2.5",
    )
    await rejected(c.processing_status("w", session_id="nope"), grpc.StatusCode.NOT_FOUND, "session 'nope'")
    await rejected(c.processing_status("w", observer_id="carol"), grpc.StatusCode.NOT_FOUND, "observer_id 'carol'")
    await rejected(c.session_summaries("w", "nope"), grpc.StatusCode.NOT_FOUND, "session 'nope'")


async def test_processing_status_shows_pending_then_in_flight_then_done(channel, model_server, start_worker):
    lines = ["I grow tomatoes on my balcony", "I also keep two beehives there"]
    model_server.reply_with(lambda request: dataclasses.replace(extract_each_turn(request), delay_s=3))
    start_worker(
        "router,deriver",
        PEERLOG_DERIVER_FLUSH="false",
        PEERLOG_DERIVER_BATCH_TOKENS=str(sum(count_tokens(t) for t in lines)),
    )
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    await c.session("w", "quiet", members=["alice"])

    def status(**scope):
        return lambda: c.processing_status("w", **scope)

    await c.add("w", "s", [("alice", lines[0])])
    await until(status(observer_id="alice", observed_id="alice", session_id="s"), lambda s: counts(s) == (1, 0, 0, 0))
    await c.add("w", "s", [("alice", lines[1])])
    await until(status(), lambda s: counts(s) == (0, 2, 0, 0))
    done = await until(status(observer_id="alice", observed_id="alice"), lambda s: counts(s) == (0, 0, 2, 0))
    assert list(done.dead_lettered_batches) == []
    assert counts(await c.processing_status("w", session_id="quiet")) == (0, 0, 0, 0)


async def test_processing_status_shows_batches_dead_lettered_after_the_model_returns_garbage(
    channel, model_server, start_worker
):
    model_server.reply_with(lambda request: Reply(content="this is not JSON at all"))
    start_worker("router,deriver")
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice",))
    sent = await c.add("w", "s", [("alice", "I live in Oslo")])

    status = await until(lambda: c.processing_status("w", session_id="s"), lambda s: counts(s) == (0, 0, 0, 1))
    (batch,) = status.dead_lettered_batches
    assert (batch.observer_id, batch.observed_id, list(batch.message_ids)) == ("alice", "alice", list(sent.message_ids))
    assert batch.error and batch.HasField("failed_at") and batch.message_count == 1
    assert await c.all_observations("w", "alice", "alice") == []


async def test_get_session_summaries_returns_the_latest_short_summary(channel, model_server, start_worker):
    written = []

    def summarise(request):
        written.append(f"summary number {len(written) + 1}")
        return Reply(content=written[-1])

    model_server.reply_with(summarise)
    start_worker("summarizer", PEERLOG_SUMMARIZER_SHORT_EVERY="2")
    c = Client(channel)
    await c.setup_conversation("w", "s")
    none_yet = await c.session_summaries("w", "s")
    assert not none_yet.HasField("short_summary") and not none_yet.HasField("long_summary")

    # turns long enough that the short summary's word limit (0.75 × input tokens) keeps it whole
    await c.add(
        "w",
        "s",
        [
            ("alice", "we planted tomatoes and basil in the garden today"),
            ("bob", "the basil will need a lot of water in this heat"),
        ],
    )
    await until(lambda: c.session_summaries("w", "s"), lambda r: r.short_summary.last_seq == 2)
    sent = await c.add(
        "w",
        "s",
        [
            ("alice", "I will set up a drip line before the weekend"),
            ("bob", "good idea, the tomatoes need staking as well"),
        ],
    )
    latest = await until(lambda: c.session_summaries("w", "s"), lambda r: r.short_summary.last_seq == 4)
    short = latest.short_summary
    assert (short.content, short.last_message_id, short.messages_covered) == (written[-1], sent.message_ids[1], 2)
    assert short.model == "test-model" and short.token_count > 0 and short.HasField("created_at")
    assert not latest.HasField("long_summary")


async def test_the_observation_service_is_served_with_health_and_reflection(channel):
    health = health_pb2_grpc.HealthStub(channel)
    answer = await health.Check(health_pb2.HealthCheckRequest(service="peerlog.v1.ObservationService"))
    assert answer.status == health_pb2.HealthCheckResponse.SERVING

    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    stream = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    async for reply in stream:
        assert "peerlog.v1.ObservationService" in {s.name for s in reply.list_services_response.service}
        break


async def test_an_observation_sent_twice_under_its_client_id_is_written_once_and_a_different_one_is_refused(
    channel, settings
):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    oslo = o.NewObservation(content="Bob lives in Oslo", session_id="s", observation_id="obs-oslo")
    first = await c.create_observations("w", "alice", "bob", [oslo, "Bob prefers tea"])
    assert first.observation_ids[0] == "obs-oslo" and first.consistency_token
    again = await c.create_observations("w", "alice", "bob", [oslo])
    assert list(again.observation_ids) == ["obs-oslo"]

    bergen = o.NewObservation(content="Bob lives in Bergen", session_id="s", observation_id="obs-oslo")
    for observer, observed, sent in (("alice", "bob", bergen), ("bob", "alice", oslo)):  # other content, pair
        await rejected(
            c.create_observations("w", observer, observed, [sent]),
            grpc.StatusCode.ALREADY_EXISTS,
            "observations[0].observation_id 'obs-oslo' is already used",
            "different observation",
            "send a new id",
        )
    await rejected(
        c.create_observations(
            "w",
            "alice",
            "bob",
            [
                o.NewObservation(content="one", observation_id="twin"),
                o.NewObservation(content="two", observation_id="twin"),
            ],
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "observation_id",
    )
    await rejected(
        c.create_observations("w", "alice", "bob", [o.NewObservation(content="x", observation_id="no spaces")]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "observations[0].observation_id",
    )

    listed = await c.all_observations("w", "alice", "bob", first.consistency_token)
    assert [x.observation_id for x in listed] == list(first.observation_ids)
    events = read_events(settings, OBSERVATIONS, lambda evs: len(evs) >= 2, settle=1)
    assert [e.observation_id for e in events] == list(first.observation_ids)


async def test_an_observation_sent_again_under_its_id_after_it_was_deleted_is_refused_not_acknowledged(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    veg = o.NewObservation(content="Bob is vegetarian", session_id="s", observation_id="obs-veg")
    made = await c.create_observations("w", "alice", "bob", [veg])
    await c.get_observation("w", "obs-veg", made.consistency_token)
    await c.delete_observation("w", "obs-veg", reason="no longer true")
    await rejected(
        c.create_observations("w", "alice", "bob", [veg, "Bob prefers tea"]),
        grpc.StatusCode.FAILED_PRECONDITION,
        "observations[0].observation_id 'obs-veg' was deleted",
        "under a new id",
    )
    renamed = o.NewObservation(content="Bob is vegetarian", session_id="s", observation_id="obs-veg-2")
    again = await c.create_observations("w", "alice", "bob", [renamed])
    listed = await c.all_observations("w", "alice", "bob", again.consistency_token)
    assert [(x.observation_id, x.content) for x in listed] == [("obs-veg-2", "Bob is vegetarian")]  # no tea: nothing


async def test_an_observation_sent_again_under_its_id_after_a_reinforcement_returns_its_id(channel, settings):
    # the deriver's reinforcement adds a source to the observation: compared with the client's request, it
    # made the resend the server advises after UNAVAILABLE an ALREADY_EXISTS
    from tests.support.observations import append, reinforcements

    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    sent = await c.add("w", "s", [("bob", "I live in Oslo"), ("bob", "Oslo is home")])
    first, later = sent.message_ids
    await c.list_messages("w", "s", sent.consistency_token)
    oslo = o.NewObservation(
        content="Bob lives in Oslo",
        session_id="s",
        sources=[source(first, "I live in Oslo")],
        observation_id="obs-oslo",
    )
    made = await c.create_observations("w", "alice", "bob", [oslo])
    await c.get_observation("w", "obs-oslo", made.consistency_token)
    reinforced = await c.get_observation("w", "obs-oslo", append(settings, reinforcements("obs-oslo", [later], "Oslo")))
    assert reinforced.source_count == 2

    again = await c.create_observations("w", "alice", "bob", [oslo])
    assert list(again.observation_ids) == ["obs-oslo"]
    assert (await c.get_observation("w", "obs-oslo", again.consistency_token)).times_derived == 2
    # the reinforcement's source is not the client's: asking for it under the id is another observation
    other = o.NewObservation(
        content="Bob lives in Oslo", session_id="s", sources=[source(later, "Oslo")], observation_id="obs-oslo"
    )
    await rejected(create_observation(c, other), grpc.StatusCode.ALREADY_EXISTS, "different observation")


async def test_an_observation_reinforced_many_times_shows_its_first_100_sources_and_how_many_it_has(channel, settings):
    from tests.support.observations import append, reinforcements

    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    ids: list[str] = []
    for start in (0, 100):
        sent = await c.add("w", "s", [("bob", f"{i}: I live in Oslo") for i in range(start, start + 100)])
        ids += list(sent.message_ids)
    await c.list_messages("w", "s", sent.consistency_token)
    made = await c.create_observations(
        "w", "alice", "bob", [o.NewObservation(content="Bob lives in Oslo", session_id="s", sources=[source(ids[0])])]
    )
    oid = made.observation_ids[0]
    await c.get_observation("w", oid, made.consistency_token)
    got = await c.get_observation("w", oid, append(settings, reinforcements(oid, ids[1:], "I live in Oslo")))
    assert got.source_count == 200 and [s.message_id for s in got.sources] == ids[:100]
    await rejected(
        create_observation(c, o.NewObservation(content="Bob says a lot", sources=[source(ids[0], "x" * 2001)])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "span has 2001 characters; the limit is 2000",
    )


def create_observation(c: Client, item: o.NewObservation):
    return c.create_observations("w", "alice", "bob", [item])


async def test_a_level_filter_repeated_past_postgres_parameter_limit_reads_as_that_level_once(channel):
    """A list of 70,000 levels made one SQL parameter each and failed UNAVAILABLE (found by fuzz seed 5555)."""
    c = Client(channel)
    await c.setup_conversation("w", "s")
    made = await c.create_observations("w", "alice", "bob", ["Bob keeps bees", "Bob sails"])
    once = await c.all_observations("w", "alice", "bob", made.consistency_token, levels=[EXPLICIT])
    many = await c.all_observations("w", "alice", "bob", made.consistency_token, levels=[EXPLICIT, DEDUCTIVE] * 35_000)
    assert [x.content for x in many] == [x.content for x in once] == ["Bob keeps bees", "Bob sails"]
