"""CloneSession over real Kafka and Postgres: copies in order that name their origin, a copy of a copy naming
the first message, derived knowledge left behind, the source's history replayed among the copies (who saw
what, members' settings, the levels that kept a message from the model), and refusals that write nothing."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from peerlog.v1 import (
    audit_pb2,
    common_pb2,
    configuration_pb2_grpc,
    context_pb2,
    context_pb2_grpc,
    messages_pb2,
    observations_pb2,
    sessions_pb2,
    workspaces_pb2,
    workspaces_pb2_grpc,
)
from peerlog.v1 import configuration_pb2 as cfg
from projections.schema import perceptions, summaries
from services.api.channels import aio_channel
from services.api.tokens import mint
from services.cli.client import Client
from tests.integration.test_deriver import rows
from tests.integration.test_idempotent_writes import servers  # noqa: F401 (a fixture)
from tests.support.model_server import Reply
from tests.support.rpc import rejected, waiting_behind
from tests.support.wait import eventually


def origin(message: messages_pb2.Message | audit_pb2.SourceMessage) -> tuple[str, str, str]:
    return message.origin.workspace_id, message.origin.session_id, message.origin.message_id


async def clone(
    c: Client, source: str, new: str, up_to: str = "", after: str = ""
) -> sessions_pb2.CloneSessionResponse:
    """`after`: the consistency token of the last write to the source, so the clone copies it."""
    return await c.sessions.CloneSession(
        sessions_pb2.CloneSessionRequest(
            workspace_id="w",
            session_id=source,
            new_session_id=new,
            up_to_message_id=up_to,
            consistency=common_pb2.ReadConsistency(consistency_token=after),
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


async def _add_member(c: Client, session_id: str, peer_id: str) -> None:
    await c.sessions.AddMembers(
        sessions_pb2.AddMembersRequest(
            workspace_id="w", session_id=session_id, members=[sessions_pb2.MemberSpec(peer_id=peer_id)]
        )
    )


async def test_a_peer_reads_in_a_clone_only_what_it_saw_in_the_source(channel, settings):
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    await c.peer("w", "carol")
    await c.add("w", "s", [("alice", "bob, the vault password is swordfish"), ("bob", "noted the vault password")])
    await _add_member(c, "s", "carol")
    sent = await c.add("w", "s", [("carol", "hello everyone, what is the vault password?")])
    token = (await clone(c, "s", "s-copy", after=sent.consistency_token)).consistency_token
    async with aio_channel(channel.address, mint(settings.auth, ["peer:w/carol"])) as chan:
        found = await workspaces_pb2_grpc.WorkspaceServiceStub(chan).SearchMessages(
            workspaces_pb2.SearchWorkspaceMessagesRequest(
                workspace_id="w",
                query="vault password swordfish",
                perspective_peer_id="carol",
                limit=50,
                consistency=common_pb2.ReadConsistency(consistency_token=token),
            )
        )
        context = await context_pb2_grpc.ContextServiceStub(chan).GetContext(
            context_pb2.GetContextRequest(
                workspace_id="w",
                session_id="s-copy",
                observer_id="carol",
                include_summary=False,
                token_budget=2000,
                consistency=common_pb2.ReadConsistency(consistency_token=token),
            )
        )
    said = "hello everyone, what is the vault password?"
    assert {r.message.content for r in found.results} == {said}  # carol's own turn, in either session
    assert [m.content for m in context.messages] == [said]
    copy = await c.sessions.GetSession(sessions_pb2.GetSessionRequest(workspace_id="w", session_id="s-copy"))
    assert sorted(m.peer_id for m in copy.memberships) == ["alice", "bob", "carol"]


async def test_a_clone_keeps_members_settings_and_the_session_level_so_new_turns_are_perceived_alike(
    channel, settings, start_worker
):
    start_worker("router")
    c = Client(channel)
    await c.workspace("w")
    for p in ("alice", "bob"):
        await c.peer("w", p)
    quiet_alice = sessions_pb2.MemberSpec(peer_id="alice", observe_me=False)
    await c.session("w", "s", members=[quiet_alice, sessions_pb2.MemberSpec(peer_id="bob", observe_others=True)])
    await c.session("w", "private", members=["alice", "bob"], configuration=cfg.Configuration(reasoning=False))
    first = await c.add("w", "s", [("alice", "first")])
    private = await c.add("w", "private", [("alice", "private first")])
    await clone(c, "s", "s-copy", after=first.consistency_token)
    await clone(c, "private", "private-copy", after=private.consistency_token)
    copy = await c.sessions.GetSession(sessions_pb2.GetSessionRequest(workspace_id="w", session_id="s-copy"))
    assert sorted(
        (m.peer_id, m.observe_me if m.HasField("observe_me") else None, m.observe_others) for m in copy.memberships
    ) == [("alice", False, False), ("bob", None, True)]
    levels = configuration_pb2_grpc.ConfigurationServiceStub(channel)
    got = await levels.GetEffectiveConfiguration(
        cfg.GetEffectiveConfigurationRequest(workspace_id="w", session_id="private-copy")
    )
    assert (got.values.reasoning, got.levels["reasoning"]) == (
        False,
        cfg.ConfigurationLevel.CONFIGURATION_LEVEL_SESSION,
    )
    for session in ("s", "s-copy", "private", "private-copy"):
        await c.add("w", session, [("bob", f"bob in {session}")])

    def perceived():
        return sorted((r["session_id"], r["observer_id"], r["observed_id"]) for r in rows(settings, perceptions))

    # bob's turns are perceived by bob about himself in s and s-copy alike; nothing in the private ones
    eventually(lambda: {p[0] for p in perceived()} >= {"s", "s-copy"}, 60)
    bobs = lambda session: [p[1:] for p in perceived() if p[0] == session and p[2] == "bob"]  # noqa: E731
    assert bobs("s-copy") == bobs("s") == [("bob", "bob")]
    assert not [p for p in perceived() if p[0].startswith("private")]


async def test_a_clone_cut_before_a_removal_leaves_the_removed_peer_out_of_new_turns(channel, settings, start_worker):
    start_worker("router")
    c = Client(channel)
    await c.workspace("w")
    for p in ("alice", "bob", "mallory"):
        await c.peer("w", p)
    watching = sessions_pb2.MemberSpec(peer_id="mallory", observe_others=True)
    await c.session("w", "s", members=["alice", "bob", watching])
    sent = await c.add("w", "s", [("alice", "one"), ("bob", "two"), ("alice", "three")])
    removed = await c.sessions.RemoveMembers(
        sessions_pb2.RemoveMembersRequest(workspace_id="w", session_id="s", peer_ids=["mallory"])
    )
    # a fork from before mallory was removed: she saw its copies in the source, but nothing said after it
    await clone(c, "s", "fork", up_to=sent.message_ids[1], after=removed.consistency_token)
    new = {}
    for session in ("s", "fork"):
        new[session] = (await c.add("w", session, [("bob", f"bob in {session}")])).message_ids[0]

    def perceived(session: str) -> list[tuple[str, str]]:
        found = rows(settings, perceptions, perceptions.c.message_id == new[session])
        return sorted((r["observer_id"], r["observed_id"]) for r in found)

    # bob's new turn is perceived by bob about himself, in the source and the fork alike: not by mallory
    eventually(lambda: perceived("s") and perceived("fork"), 60)
    assert perceived("fork") == perceived("s") == [("bob", "bob")]
    fork = await c.sessions.GetSession(sessions_pb2.GetSessionRequest(workspace_id="w", session_id="fork"))
    assert sorted((m.peer_id, m.HasField("left_at")) for m in fork.memberships) == [
        ("alice", False),
        ("bob", False),
        ("mallory", True),
    ]
    copies = await c.all_messages("w", "fork")
    assert [m.content for m in copies] == ["one", "two", "bob in fork"]


async def test_a_copy_of_a_message_kept_from_the_summarizer_is_kept_from_it_too(
    channel, settings, model_server, start_worker
):
    model_server.reply_with(lambda req: Reply(content="a short summary"))
    start_worker("summarizer", PEERLOG_SUMMARIZER_SHORT_EVERY="3", PEERLOG_SUMMARIZER_LONG_EVERY="1000")
    c = Client(channel)
    await c.setup_conversation("w", "s")
    secret = messages_pb2.NewMessage(
        peer_id="alice", content="my card number is 4111-SECRET", configuration=cfg.Configuration(summaries=False)
    )
    await c.add("w", "s", [secret, ("bob", "two"), ("alice", "three"), ("bob", "four")])
    eventually(lambda: summarised(settings, "s"), 60)
    await clone(c, "s", "s-copy")
    eventually(lambda: summarised(settings, "s-copy"), 60)
    assert not any("4111-SECRET" in str(r) for r in model_server.chat_requests())


def summarised(settings, session_id: str) -> list:
    return rows(settings, summaries, summaries.c.session_id == session_id)


async def test_a_clone_given_a_consistency_token_copies_the_writes_it_names(channel, projector):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.list_messages("w", "s", (await c.add("w", "s", [("alice", "one")])).consistency_token)
    projector.stop()  # a projector a moment behind the acknowledged write
    try:
        sent = await c.add("w", "s", [("bob", "two: acknowledged")])
        cloning = asyncio.ensure_future(
            c.sessions.CloneSession(
                sessions_pb2.CloneSessionRequest(
                    workspace_id="w",
                    session_id="s",
                    new_session_id="s-copy",
                    consistency=common_pb2.ReadConsistency(consistency_token=sent.consistency_token),
                )
            )
        )
        await asyncio.sleep(1.0)
        assert not cloning.done()
    finally:
        projector.start()
    out = await cloning
    copies = await c.all_messages("w", "s-copy", out.consistency_token)
    assert [m.content for m in copies] == ["one", "two: acknowledged"]


async def test_a_clone_not_yet_readable_says_it_stands_and_a_second_clone_into_its_id_waits_then_is_refused(
    servers, projector
):
    _, c = await servers(consistency_wait_s=5.0)
    # another API process (the id's lock is Postgres's, not one process's), which waits for it up to its
    # consistency wait: long enough for the projector to be back
    _, other = await servers(consistency_wait_s=45.0)
    await c.setup_conversation("w", "s")
    await c.list_messages("w", "s", (await c.add("w", "s", [("alice", "one")])).consistency_token)
    request = sessions_pb2.CloneSessionRequest(workspace_id="w", session_id="s", new_session_id="s-copy")
    second = await waiting_behind(
        projector,
        lambda: c.sessions.CloneSession(request, timeout=30),
        lambda: other.sessions.CloneSession(request, timeout=60),
        "is on the log but not readable",
        "it stands",
    )
    await rejected(second, grpc.StatusCode.ALREADY_EXISTS, "already exists")
    # refused once the first clone was readable: its copies are there, once
    assert [m.content for m in await c.all_messages("w", "s-copy")] == ["one"]
