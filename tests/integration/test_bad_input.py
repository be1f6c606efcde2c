"""Bad requests get a clear status and a message a person can act on, and write nothing."""

from __future__ import annotations

import grpc
import pytest
from confluent_kafka import Consumer, TopicPartition

from peerlog.v1 import common_pb2, messages_pb2, peers_pb2, sessions_pb2
from services.bus.topics import ALL_TOPICS
from tests.support.client import Client


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
    await rejected(convo.add("acme", "s1", [("al ice", "hi")]), grpc.StatusCode.INVALID_ARGUMENT,
                   "messages[0].peer_id")
    assert log_end_offsets(settings) == before


async def test_message_content_limits_are_enforced_and_nothing_of_the_batch_is_written(convo, settings):
    before = log_end_offsets(settings)
    await rejected(convo.add("acme", "s1", [("alice", "fine"), ("bob", "   ")]),
                   grpc.StatusCode.INVALID_ARGUMENT, "messages[1].content is empty")
    await rejected(convo.add("acme", "s1", [("alice", "x" * 25_001)]),
                   grpc.StatusCode.INVALID_ARGUMENT, "25001", "25000")
    await rejected(convo.add("acme", "s1", []), grpc.StatusCode.INVALID_ARGUMENT, "at least one")
    await rejected(convo.add("acme", "s1", [("alice", "m")] * 101),
                   grpc.StatusCode.INVALID_ARGUMENT, "at most 100", "got 101")
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
    await rejected(convo.session("acme", "s2", members=["ghost"]), grpc.StatusCode.NOT_FOUND,
                   "ghost", "GetOrCreatePeer")
    await rejected(
        convo.messages.GetMessage(messages_pb2.GetMessageRequest(workspace_id="acme", message_id="m1")),
        grpc.StatusCode.NOT_FOUND, "m1",
    )
    assert log_end_offsets(settings) == before


async def test_a_peer_that_is_not_a_member_cannot_post(convo, settings):
    before = log_end_offsets(settings)
    await rejected(convo.add("acme", "s1", [("alice", "ok"), ("carol", "let me in")]),
                   grpc.StatusCode.FAILED_PRECONDITION, "carol", "AddMembers")
    assert log_end_offsets(settings) == before


async def test_a_peer_that_left_can_no_longer_post(convo):
    await convo.sessions.RemoveMembers(
        sessions_pb2.RemoveMembersRequest(workspace_id="acme", session_id="s1", peer_ids=["bob"])
    )
    await rejected(convo.add("acme", "s1", [("bob", "still here?")]),
                   grpc.StatusCode.FAILED_PRECONDITION, "bob")


async def test_membership_changes_that_make_no_sense_are_refused(convo):
    await rejected(
        convo.sessions.AddMembers(sessions_pb2.AddMembersRequest(
            workspace_id="acme", session_id="s1", members=[sessions_pb2.MemberSpec(peer_id="alice")])),
        grpc.StatusCode.ALREADY_EXISTS, "alice",
    )
    await rejected(
        convo.sessions.RemoveMembers(sessions_pb2.RemoveMembersRequest(
            workspace_id="acme", session_id="s1", peer_ids=["carol"])),
        grpc.StatusCode.FAILED_PRECONDITION, "carol",
    )
    await rejected(convo.session("acme", "s3", members=["alice", "alice"]),
                   grpc.StatusCode.INVALID_ARGUMENT, "twice")


async def test_malformed_page_and_consistency_tokens_are_invalid_argument(convo):
    await rejected(convo.list_messages("acme", "s1", page_token="%%%"), grpc.StatusCode.INVALID_ARGUMENT,
                   "page_token")
    await rejected(convo.list_messages("acme", "s1", token="garbage"), grpc.StatusCode.INVALID_ARGUMENT,
                   "consistency token")
    await rejected(
        convo.peers.ListPeers(peers_pb2.ListPeersRequest(
            workspace_id="acme", page=common_pb2.PageRequest(page_size=5000))),
        grpc.StatusCode.INVALID_ARGUMENT, "page_size",
    )
