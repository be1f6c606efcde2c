"""Bad requests get a clear status and a message a person can act on, and write nothing."""

from __future__ import annotations

import grpc
import pytest
from confluent_kafka import Consumer, TopicPartition
from google.protobuf import struct_pb2, timestamp_pb2
from sqlalchemy import func, select

from peerlog.v1 import (
    audit_pb2,
    audit_pb2_grpc,
    common_pb2,
    configuration_pb2,
    context_pb2,
    context_pb2_grpc,
    dreams_pb2,
    messages_pb2,
    observations_pb2,
    observations_pb2_grpc,
    peers_pb2,
    sessions_pb2,
    webhooks_pb2,
    workspaces_pb2,
)
from projections.db import sync_engine
from projections.schema import quarantine
from services.bus.topics import ALL_TOPICS
from services.cli.client import Client


def log_end_offsets(settings) -> dict:
    consumer = Consumer({"bootstrap.servers": settings.kafka.bootstrap_servers, "group.id": "probe"})
    try:
        ends = {}
        for spec in ALL_TOPICS:
            topic = spec.full_name(settings.kafka.topic_prefix)
            for p in range(settings.kafka.partitions):
                ends[(topic, p)] = consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
        return ends
    finally:
        consumer.close()


async def rejected(call, code: grpc.StatusCode, *phrases: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, err.value.details()
    for phrase in phrases:
        assert phrase in err.value.details()


@pytest.fixture
async def convo(channel):
    c = Client(channel)
    await c.setup_conversation("acme", "s1", peers=("alice", "bob"))
    await c.peer("acme", "carol")  # exists but is not in s1
    return c


async def test_bad_ids_are_invalid_argument_and_say_what_an_id_may_contain(convo, settings):
    before = log_end_offsets(settings)
    await rejected(convo.workspace("bad id!"), grpc.StatusCode.INVALID_ARGUMENT, "workspace_id", "A–Z")
    await rejected(convo.peer("acme", "x" * 513), grpc.StatusCode.INVALID_ARGUMENT, "peer_id")
    await rejected(convo.session("acme", "s/2"), grpc.StatusCode.INVALID_ARGUMENT, "session_id")
    await rejected(convo.add("acme", "s1", [("al ice", "hi")]), grpc.StatusCode.INVALID_ARGUMENT, "messages[0].peer_id")
    assert log_end_offsets(settings) == before


async def test_message_content_limits_are_enforced_and_nothing_of_the_batch_is_written(convo, settings):
    before = log_end_offsets(settings)
    await rejected(
        convo.add("acme", "s1", [("alice", "fine"), ("bob", "   ")]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "messages[1].content is empty",
    )
    await rejected(
        convo.add("acme", "s1", [("alice", "x" * 25_001)]), grpc.StatusCode.INVALID_ARGUMENT, "25001", "25000"
    )
    await rejected(convo.add("acme", "s1", []), grpc.StatusCode.INVALID_ARGUMENT, "at least one")
    await rejected(
        convo.add("acme", "s1", [("alice", "m")] * 101), grpc.StatusCode.INVALID_ARGUMENT, "at most 100", "got 101"
    )
    assert log_end_offsets(settings) == before
    assert (await convo.list_messages("acme", "s1")).messages == []


async def test_exactly_the_limits_are_accepted(convo):
    resp = await convo.add("acme", "s1", [("alice", "x" * 25_000)] + [("bob", "y")] * 99)
    got = await convo.all_messages("acme", "s1", token=resp.consistency_token, page_size=1000)
    assert len(got) == 100 and len(got[0].content) == 25_000


async def test_unknown_workspace_session_and_peer_are_not_found(convo, settings):
    before = log_end_offsets(settings)
    await rejected(convo.peer("nowhere", "alice"), grpc.StatusCode.NOT_FOUND, "nowhere", "GetOrCreateWorkspace")
    await rejected(convo.add("acme", "nope", [("alice", "hi")]), grpc.StatusCode.NOT_FOUND, "nope")
    await rejected(convo.add("acme", "s1", [("ghost", "boo")]), grpc.StatusCode.NOT_FOUND, "ghost")
    await rejected(
        convo.session("acme", "s2", members=["ghost"]), grpc.StatusCode.NOT_FOUND, "ghost", "GetOrCreatePeer"
    )
    await rejected(
        convo.messages.GetMessage(messages_pb2.GetMessageRequest(workspace_id="acme", message_id="m1")),
        grpc.StatusCode.NOT_FOUND,
        "m1",
    )
    assert log_end_offsets(settings) == before


async def test_a_peer_that_is_not_a_member_cannot_post(convo, settings):
    before = log_end_offsets(settings)
    await rejected(
        convo.add("acme", "s1", [("alice", "ok"), ("carol", "let me in")]),
        grpc.StatusCode.FAILED_PRECONDITION,
        "carol",
        "AddMembers",
    )
    assert log_end_offsets(settings) == before


async def test_a_peer_that_left_can_no_longer_post(convo):
    await convo.sessions.RemoveMembers(
        sessions_pb2.RemoveMembersRequest(workspace_id="acme", session_id="s1", peer_ids=["bob"])
    )
    await rejected(convo.add("acme", "s1", [("bob", "still here?")]), grpc.StatusCode.FAILED_PRECONDITION, "bob")


async def test_membership_changes_that_make_no_sense_are_refused(convo):
    await rejected(
        convo.sessions.AddMembers(
            sessions_pb2.AddMembersRequest(
                workspace_id="acme", session_id="s1", members=[sessions_pb2.MemberSpec(peer_id="alice")]
            )
        ),
        grpc.StatusCode.ALREADY_EXISTS,
        "alice",
    )
    await rejected(
        convo.sessions.RemoveMembers(
            sessions_pb2.RemoveMembersRequest(workspace_id="acme", session_id="s1", peer_ids=["carol"])
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        "carol",
    )
    await rejected(convo.session("acme", "s3", members=["alice", "alice"]), grpc.StatusCode.INVALID_ARGUMENT, "twice")
    await rejected(
        convo.sessions.AddMembers(sessions_pb2.AddMembersRequest(workspace_id="acme", session_id="s1")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "members is empty",
    )
    await rejected(
        convo.sessions.RemoveMembers(sessions_pb2.RemoveMembersRequest(workspace_id="acme", session_id="s1")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "peer_ids is empty",
    )


async def test_sessions_of_a_peer_that_does_not_exist_are_not_found(convo):
    await rejected(
        convo.sessions.ListSessions(sessions_pb2.ListSessionsRequest(workspace_id="acme", peer_id="nobody")),
        grpc.StatusCode.NOT_FOUND,
        "nobody",
    )


async def test_malformed_page_and_consistency_tokens_are_invalid_argument(convo):
    await rejected(convo.list_messages("acme", "s1", page_token="%%%"), grpc.StatusCode.INVALID_ARGUMENT, "page_token")
    await rejected(
        convo.list_messages("acme", "s1", token="garbage"), grpc.StatusCode.INVALID_ARGUMENT, "consistency token"
    )
    await rejected(
        convo.peers.ListPeers(
            peers_pb2.ListPeersRequest(workspace_id="acme", page=common_pb2.PageRequest(page_size=5000))
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_size",
    )


def metadata(value: dict) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


def quarantined(settings) -> int:
    with sync_engine(settings.database).connect() as conn:
        return conn.scalar(select(func.count()).select_from(quarantine))


def message_with(metadata_value: dict, content: str = "hi") -> messages_pb2.NewMessage:
    return messages_pb2.NewMessage(peer_id="alice", content=content, metadata=metadata(metadata_value))


async def test_nul_in_any_written_string_is_invalid_argument_naming_the_field_and_nothing_is_written(convo, settings):
    made = await convo.add("acme", "s1", [("alice", "I keep bees")])
    await convo.list_messages("acme", "s1", made.consistency_token)
    before = log_end_offsets(settings)
    nul = "a\x00b"
    cases = [
        (convo.add("acme", "s1", [("alice", "fine"), ("bob", nul)]), "messages[1].content"),
        (convo.add("acme", "s1", [message_with({nul: 1})]), "messages[0].metadata key"),
        (convo.add("acme", "s1", [message_with({"a": {"b": [1, nul]}})]), "messages[0].metadata['a']['b'][1]"),
        (
            convo.workspaces.GetOrCreateWorkspace(
                workspaces_pb2.GetOrCreateWorkspaceRequest(workspace_id="w2", metadata=metadata({"k": nul}))
            ),
            "metadata['k']",
        ),
        (convo.peer("acme", "dave", metadata=metadata({nul: "v"})), "metadata key"),
        (convo.session("acme", "s9", metadata=metadata({"k": [nul]})), "metadata['k'][0]"),
        (
            convo.create_observations("acme", "alice", "bob", [observations_pb2.NewObservation(content=nul)]),
            "observations[0].content",
        ),
        (
            convo.create_observations(
                "acme",
                "alice",
                "alice",
                [
                    observations_pb2.NewObservation(
                        content="Alice keeps bees",
                        sources=[observations_pb2.ObservationSource(message_id=made.message_ids[0], span="bees\x00")],
                    )
                ],
            ),
            "observations[0].sources[0].span",
        ),
        (
            convo.peers.SetPeerCard(
                peers_pb2.SetPeerCardRequest(
                    workspace_id="acme", observer_id="alice", observed_id="bob", entries=[f"IDENTITY: {nul}"]
                )
            ),
            "entries[0]",
        ),
        (
            convo.dreams.ScheduleDream(
                dreams_pb2.ScheduleDreamRequest(workspace_id="acme", observer_id="alice", reason=nul)
            ),
            "reason",
        ),
        # found by the long fuzz: accepted, then quarantined by the projector (jsonb holds no NUL)
        (
            convo.configuration.SetMessageConfiguration(
                configuration_pb2.SetMessageConfigurationRequest(
                    workspace_id="acme",
                    session_id="s1",
                    message_id=made.message_ids[0],
                    configuration=configuration_pb2.Configuration(dialectic_instructions=nul),
                )
            ),
            "configuration.dialectic_instructions",
        ),
        (
            convo.configuration.SetWorkspaceConfiguration(
                configuration_pb2.SetWorkspaceConfigurationRequest(
                    workspace_id="acme", configuration=configuration_pb2.Configuration(deriver_instructions=nul)
                )
            ),
            "configuration.deriver_instructions",
        ),
        (
            convo.messages.AddMessages(
                messages_pb2.AddMessagesRequest(
                    workspace_id="acme",
                    session_id="s1",
                    messages=[
                        messages_pb2.NewMessage(
                            peer_id="alice",
                            content="hi",
                            configuration=configuration_pb2.Configuration(deriver_instructions=nul),
                        )
                    ],
                )
            ),
            "deriver_instructions",
        ),
    ]
    for call, field in cases:
        await rejected(call, grpc.StatusCode.INVALID_ARGUMENT, field, "NUL")
    assert log_end_offsets(settings) == before
    assert quarantined(settings) == 0


async def test_metadata_numbers_json_cannot_hold_are_invalid_argument(convo, settings):
    before = log_end_offsets(settings)
    for number in (float("nan"), float("inf"), float("-inf")):
        await rejected(
            convo.add("acme", "s1", [message_with({"score": {"x": [number]}})]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "messages[0].metadata",
            "NaN or Infinity",
        )
        await rejected(
            convo.peer("acme", "erin", metadata=metadata({"n": number})),
            grpc.StatusCode.INVALID_ARGUMENT,
            "metadata",
            "NaN or Infinity",
        )
    assert log_end_offsets(settings) == before


async def test_metadata_over_64_kb_is_invalid_argument_not_unavailable(convo, settings):
    before = log_end_offsets(settings)
    await rejected(
        convo.add("acme", "s1", [message_with({"blob": "x" * 70_000})]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "messages[0].metadata",
        "the limit is 65536",
    )
    await rejected(
        convo.add("acme", "s1", [message_with({"blob": "x" * 3_000_000})]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "messages[0].metadata",
        "65536",
    )
    await rejected(
        convo.session("acme", "s8", metadata=metadata({"blob": "y" * 1_000_000})),
        grpc.StatusCode.INVALID_ARGUMENT,
        "metadata",
        "65536",
    )
    assert log_end_offsets(settings) == before
    just_under = {"blob": "z" * (65_536 - len('{"blob":""}'))}
    sent = await convo.add("acme", "s1", [message_with(just_under)])
    (got,) = (await convo.list_messages("acme", "s1", sent.consistency_token)).messages
    assert len(got.metadata["blob"]) == len(just_under["blob"])


async def test_search_queries_with_nul_or_over_10000_characters_are_invalid_argument(convo, channel):
    context = context_pb2_grpc.ContextServiceStub(channel)
    for bad, phrase in (("find\x00me", "NUL"), ("x" * 10_001, "the limit is 10000")):
        await rejected(
            convo.workspaces.SearchMessages(
                workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="acme", query=bad)
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "query",
            phrase,
        )
        await rejected(
            context.GetContext(
                context_pb2.GetContextRequest(
                    workspace_id="acme", session_id="s1", observer_id="alice", search_query=bad
                )
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "search_query",
            phrase,
        )
        await rejected(
            context.GetRepresentation(
                context_pb2.GetRepresentationRequest(workspace_id="acme", observer_id="alice", search_query=bad)
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "search_query",
            phrase,
        )


async def test_malformed_ids_are_invalid_argument_before_any_read_on_the_fast_paths(convo, channel, settings):
    """Found by the long fuzz: AddMessages' one-statement checks and the searches' read of the peers a query
    names sent a NUL id to Postgres, which refused it, and the caller got INTERNAL."""
    context = context_pb2_grpc.ContextServiceStub(channel)
    before = log_end_offsets(settings)
    for bad in ("acme\x00", "", "a c"):
        await rejected(convo.add(bad, "s1", [("alice", "hi")]), grpc.StatusCode.INVALID_ARGUMENT, "workspace_id")
        await rejected(
            convo.workspaces.SearchMessages(
                workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id=bad, query="bees")
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "workspace_id",
        )
        await rejected(
            context.GetContext(
                context_pb2.GetContextRequest(workspace_id=bad, session_id="s1", observer_id="alice", search_query="b")
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "workspace_id",
        )
        await rejected(
            context.GetRepresentation(
                context_pb2.GetRepresentationRequest(workspace_id=bad, observer_id="alice", search_query="bees")
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "workspace_id",
        )
    await rejected(convo.add("acme", "s1\x00", [("alice", "hi")]), grpc.StatusCode.INVALID_ARGUMENT, "session_id")
    await rejected(
        convo.workspaces.SearchMessages(
            workspaces_pb2.SearchWorkspaceMessagesRequest(
                workspace_id="acme", query="bees", perspective_peer_id="al\x00"
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "perspective_peer_id",
    )
    # found by a later seed: a keyed CreateObservations looked its key up under the pair before it checked it
    observations = observations_pb2_grpc.ObservationServiceStub(channel)
    for field in ("observer_id", "observed_id"):
        pair = {"observer_id": "alice", "observed_id": "alice", field: "ali\x00ce"}
        await rejected(
            observations.CreateObservations(
                observations_pb2.CreateObservationsRequest(
                    workspace_id="acme",
                    observations=[observations_pb2.NewObservation(content="moved to Oslo")],
                    idempotency_key="k1",
                    **pair,
                )
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            field,
        )
    assert log_end_offsets(settings) == before


async def test_derivation_and_dream_id_filters_are_checked_as_ids_before_any_read(convo, channel):
    """Found in review: a NUL in either reached Postgres (INTERNAL), and a derivation of 3 MB was taken."""
    audit = audit_pb2_grpc.AuditServiceStub(channel)
    for bad in ("a\x00b", "a" * 3_000_000, "a b"):
        await rejected(
            convo.observations.ListObservations(
                observations_pb2.ListObservationsRequest(
                    workspace_id="acme", observer_id="alice", observed_id="alice", derivation=bad
                )
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "derivation",
            "is not a valid id",
        )
        for pair in ({}, {"observer_id": "alice", "observed_id": "alice"}):
            await rejected(
                audit.ListRejectedObservations(
                    audit_pb2.ListRejectedObservationsRequest(workspace_id="acme", dream_id=bad, **pair)
                ),
                grpc.StatusCode.INVALID_ARGUMENT,
                "dream_id",
                "is not a valid id",
            )
    named = observations_pb2.ListObservationsRequest(
        workspace_id="acme", observer_id="alice", observed_id="alice", derivation="original"
    )
    assert not (await convo.observations.ListObservations(named)).observations
    unseen = audit_pb2.ListRejectedObservationsRequest(workspace_id="acme", dream_id="0190-no-such-dream")
    assert not (await audit.ListRejectedObservations(unseen)).rejections


async def test_a_time_word_outside_the_years_1_to_9999_is_no_time_and_the_search_answers(convo):
    """Found in review: "3000 years ago", or "yesterday" before a bound in year 1, overflowed (INTERNAL)."""
    year_1 = timestamp_pb2.Timestamp(seconds=-62135596800 + 3600)  # 0001-01-01T01:00Z
    for query, bounds in (
        ("what did we do 3000 years ago", {}),
        ("what happened 99999999999 days ago", {}),
        ("what did you write yesterday", {"before": year_1}),
    ):
        request = workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="acme", query=query, **bounds)
        await convo.workspaces.SearchMessages(request)


async def test_a_time_word_with_a_turkish_i_or_long_s_is_no_time_and_the_search_answers(convo, channel):
    """Found in review: Unicode case folding let "fıve days ago" match "five" and then miss the number table
    (KeyError): SearchMessages and GetContext answered INTERNAL."""
    context = context_pb2_grpc.ContextServiceStub(channel)
    for query in ("what did we do fıve days ago", "FİVE DAYS AGO", "ſix days ago", "ſeven weeks ago"):
        await convo.workspaces.SearchMessages(
            workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="acme", query=query)
        )
        await convo.sessions.SearchMessages(
            sessions_pb2.SearchSessionMessagesRequest(workspace_id="acme", session_id="s1", query=query)
        )
        await context.GetContext(
            context_pb2.GetContextRequest(workspace_id="acme", session_id="s1", observer_id="alice", search_query=query)
        )


async def test_search_filters_of_70000_ids_are_invalid_argument(convo):
    many = [f"s{i}" for i in range(70_000)]
    await rejected(
        convo.workspaces.SearchMessages(
            workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="acme", query="bees", session_ids=many)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "session_ids lists 70000 ids; the limit is 100",
    )
    await rejected(
        convo.workspaces.SearchMessages(
            workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="acme", query="bees", author_peer_ids=many)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "author_peer_ids lists 70000 ids; the limit is 100",
    )
    await rejected(
        convo.sessions.SearchMessages(
            sessions_pb2.SearchSessionMessagesRequest(
                workspace_id="acme", session_id="s1", query="bees", author_peer_ids=many
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "the limit is 100",
    )


async def test_not_found_for_many_unknown_ids_names_a_few_and_counts_the_rest(convo):
    unknown = [f"nosuch{i}" for i in range(100)]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await convo.workspaces.SearchMessages(
            workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="acme", query="bees", session_ids=unknown)
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND, err.value.details()
    assert "'nosuch0'" in err.value.details() and "and 95 more" in err.value.details()
    assert "nosuch99" not in err.value.details() and len(err.value.details()) < 400
    await rejected(
        convo.session("acme", "s7", members=[f"ghost{i}" for i in range(500)]),  # the most a session holds
        grpc.StatusCode.NOT_FOUND,
        "'ghost0'",
        "and 495 more",
    )


async def test_a_search_top_k_over_500_is_invalid_argument_and_500_is_accepted(convo):
    def context(top_k: int):
        return convo.context.GetContext(
            context_pb2.GetContextRequest(
                workspace_id="acme", session_id="s1", observer_id="alice", search_query="tea", search_top_k=top_k
            )
        )

    # a representation holds at most 500 observations; 2^32 - 1 scanned the whole store
    await rejected(context(4_294_967_295), grpc.StatusCode.INVALID_ARGUMENT, "search_top_k 4294967295", "500")
    await rejected(
        convo.context.GetRepresentation(
            context_pb2.GetRepresentationRequest(
                workspace_id="acme", observer_id="alice", search_query="tea", search_top_k=501
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "search_top_k 501",
    )
    await context(500)


async def test_context_reads_missing_whose_knowledge_or_naming_no_peer_are_refused(convo):
    await rejected(
        convo.context.GetRepresentation(context_pb2.GetRepresentationRequest(workspace_id="acme")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "observer_id is required",
    )
    await rejected(
        convo.context.GetContext(context_pb2.GetContextRequest(workspace_id="acme", session_id="s1", target_id="bob")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "target_id needs an observer_id",
    )
    await rejected(
        convo.context.GetContext(
            context_pb2.GetContextRequest(workspace_id="acme", session_id="s1", assistant_peer_id="nobody")
        ),
        grpc.StatusCode.NOT_FOUND,
        "assistant_peer_id 'nobody'",
    )


async def test_a_webhook_in_an_unknown_workspace_is_not_found_and_is_not_registered(convo):
    def create(workspace_id: str):
        return convo.webhooks.CreateWebhook(
            webhooks_pb2.CreateWebhookRequest(workspace_id=workspace_id, url="https://93.184.216.34/hook")
        )

    await rejected(create("nowhere"), grpc.StatusCode.NOT_FOUND, "workspace 'nowhere'", "GetOrCreateWorkspace")
    listed = await convo.webhooks.ListWebhooks(webhooks_pb2.ListWebhooksRequest(workspace_id="nowhere"))
    assert list(listed.webhooks) == []
    made = await create("acme")  # the workspace that exists still takes one
    await convo.webhooks.DeleteWebhook(
        webhooks_pb2.DeleteWebhookRequest(workspace_id="acme", webhook_id=made.webhook.webhook_id)
    )
