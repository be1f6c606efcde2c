"""CloneSession over real Kafka and Postgres: copies in order that name their origin, a copy of a copy naming
the first message, derived knowledge left behind, and refusals that write nothing."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from peerlog.v1 import audit_pb2, messages_pb2, observations_pb2, sessions_pb2
from services.cli.client import Client
from tests.support.rpc import rejected


def origin(message: messages_pb2.Message | audit_pb2.SourceMessage) -> tuple[str, str, str]:
    return message.origin.workspace_id, message.origin.session_id, message.origin.message_id


async def clone(c: Client, source: str, new: str, up_to: str = "") -> sessions_pb2.CloneSessionResponse:
    return await c.sessions.CloneSession(
        sessions_pb2.CloneSessionRequest(
            workspace_id="w", session_id=source, new_session_id=new, up_to_message_id=up_to
        )
    )


@pytest.fixture
async def source(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    tagged = messages_pb2.NewMessage(peer_id="alice", content="tea?", metadata=struct_pb2.Struct())
    tagged.metadata.update({"mood": "thirsty"})
    sent = await c.add("w", "s", [tagged, ("bob", "yes, green tea"), ("alice", "coming up")])
    await c.list_messages("w", "s", sent.consistency_token)
    made = await c.create_observations("w", "alice", "bob", ["Bob drinks green tea"])
    await c.all_observations("w", "alice", "bob", made.consistency_token)
    return c, list(sent.message_ids)


async def test_a_clone_copies_the_messages_in_order_up_to_one_and_each_copy_names_its_origin(source):
    c, ids = source
    out = await clone(c, "s", "c1", up_to=ids[1])
    assert out.session.session_id == "c1" and len(out.message_ids) == 2
    assert sorted(m.peer_id for m in out.session.memberships) == ["alice", "bob"]
    original = await c.all_messages("w", "s")
    copies = await c.all_messages("w", "c1", out.consistency_token)
    assert [(m.peer_id, m.content, m.created_at, json_format.MessageToDict(m.metadata)) for m in copies] == [
        (m.peer_id, m.content, m.created_at, json_format.MessageToDict(m.metadata)) for m in original[:2]
    ]
    assert [m.message_id for m in copies] == list(out.message_ids) and not set(out.message_ids) & set(ids)
    firsts = [
        await c.messages.GetMessage(messages_pb2.GetMessageRequest(workspace_id="w", message_id=i))
        for i in out.message_ids
    ]
    assert [origin(m) for m in firsts] == [("w", "s", ids[0]), ("w", "s", ids[1])]
    plain = await c.messages.GetMessage(messages_pb2.GetMessageRequest(workspace_id="w", message_id=ids[0]))
    assert not plain.HasField("origin")


async def test_a_copy_of_a_copy_names_the_first_message_and_no_derived_knowledge_is_copied(source):
    c, ids = source
    first = await clone(c, "s", "c1")
    second = await clone(c, "c1", "c2")
    copies = [
        await c.messages.GetMessage(
            messages_pb2.GetMessageRequest(
                workspace_id="w", message_id=i, consistency={"consistency_token": second.consistency_token}
            )
        )
        for i in second.message_ids
    ]
    assert [origin(m) for m in copies] == [("w", "s", i) for i in ids]
    assert first.message_ids != second.message_ids
    for session in ("c1", "c2"):  # the store holds only what was learnt in s
        assert await c.all_observations("w", "alice", "bob", session_id=session) == []
    assert [o.content for o in await c.all_observations("w", "alice", "bob")] == ["Bob drinks green tea"]


async def test_provenance_through_a_copy_names_where_the_message_was_first_sent(source):
    c, ids = source
    copied = await clone(c, "s", "c1")
    await c.all_messages("w", "c1", copied.consistency_token)
    cited = observations_pb2.NewObservation(
        content="Bob said yes to green tea",
        session_id="c1",
        sources=[observations_pb2.ObservationSource(message_id=copied.message_ids[1], span="yes, green tea")],
    )
    made = await c.create_observations("w", "alice", "bob", [cited])
    got = await c.audit.GetProvenance(
        audit_pb2.GetProvenanceRequest(
            workspace_id="w",
            observation_id=made.observation_ids[0],
            consistency={"consistency_token": made.consistency_token},
        )
    )
    (source_message,) = got.nodes[0].source_messages
    assert (source_message.message_id, source_message.session_id) == (copied.message_ids[1], "c1")
    assert origin(source_message) == ("w", "s", ids[1])


async def test_refused_clones_say_why_and_write_nothing(source):
    c, ids = source
    await clone(c, "s", "c1")
    await rejected(clone(c, "s", "c1"), grpc.StatusCode.ALREADY_EXISTS, "'c1' already exists")
    await rejected(clone(c, "nope", "c3"), grpc.StatusCode.NOT_FOUND, "session 'nope' does not exist")
    await rejected(
        clone(c, "s", "c4", up_to="m-unknown"), grpc.StatusCode.NOT_FOUND, "'m-unknown' is not a message of the session"
    )
    await rejected(clone(c, "s", "bad id!"), grpc.StatusCode.INVALID_ARGUMENT, "new_session_id")
    listed = await c.sessions.ListSessions(sessions_pb2.ListSessionsRequest(workspace_id="w"))
    assert [s.session_id for s in listed.sessions] == ["c1", "s"]
