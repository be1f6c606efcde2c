"""Two API servers (each its own locks, pools and producer, as two processes have) on one log: a write that
checks the projection, then appends, is one at a time per entity across them."""

from __future__ import annotations

import asyncio
import time

import grpc
from sqlalchemy import func, select

from peerlog.v1 import common_pb2, configuration_pb2, messages_pb2, sessions_pb2, workspaces_pb2
from projections.db import sync_engine
from projections.schema import configurations, memberships, messages
from tests.integration.test_bad_input import quarantined
from tests.integration.test_idempotent_writes import servers  # noqa: F401 (a fixture)
from tests.support.rpc import rejected, waiting_behind
from tests.support.wait import until


async def settled(call):
    """`call()`'s answer once the projector is back and the entity's earlier write readable: until then it
    may wait out its lock wait (UNAVAILABLE, nothing written) and is sent again."""
    for _ in range(60):
        try:
            return await call()
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            await asyncio.sleep(0.5)
    return await call()


def outcomes(results) -> list[str]:
    return sorted(r.code().name if isinstance(r, grpc.aio.AioRpcError) else "OK" for r in results)


async def test_two_clones_into_one_new_session_on_two_servers_copy_once(settings, servers):  # noqa: F811
    (_, a), (_, b) = await servers(), await servers()
    await a.setup_conversation("acme", "src")
    added = await a.add("acme", "src", [("alice", "one"), ("bob", "two"), ("alice", "three")])
    clone = sessions_pb2.CloneSessionRequest(
        workspace_id="acme",
        session_id="src",
        new_session_id="copy",
        consistency=common_pb2.ReadConsistency(consistency_token=added.consistency_token),  # copies all three
    )

    results = await asyncio.gather(
        a.sessions.CloneSession(clone), b.sessions.CloneSession(clone), return_exceptions=True
    )

    assert outcomes(results) == ["ALREADY_EXISTS", "OK"]  # both were OK, and the copy held every message twice
    with sync_engine(settings.database).connect() as conn:
        copied = conn.scalars(
            select(messages.c.content).where(messages.c.session_id == "copy").order_by(messages.c.seq)
        )
        assert list(copied) == ["one", "two", "three"]
    assert quarantined(settings) == 0


async def test_two_creates_of_one_workspace_on_two_servers_keep_the_creators_configuration(settings, servers):  # noqa: F811
    (_, a), (_, b) = await servers(), await servers()

    def create(threshold: int) -> workspaces_pb2.GetOrCreateWorkspaceRequest:
        configured = configuration_pb2.Configuration(dream_threshold=threshold)
        return workspaces_pb2.GetOrCreateWorkspaceRequest(workspace_id="w", configuration=configured)

    first, second = await asyncio.gather(
        a.workspaces.GetOrCreateWorkspace(create(11)), b.workspaces.GetOrCreateWorkspace(create(22))
    )

    assert sorted([first.created, second.created]) == [False, True]
    with sync_engine(settings.database).connect() as conn:
        c = configurations.c
        kept = list(conn.scalars(select(c.configuration).where(c.workspace_id == "w", c.level == "workspace")))
    # the loser's configuration was applied too, and mostly won: it was recorded last
    assert [k["dream_threshold"] for k in kept] == [11 if first.created else 22]


async def test_a_member_add_not_yet_readable_keeps_the_sessions_lock_so_a_second_on_another_server_is_refused(
    settings,
    servers,  # noqa: F811
    projector,
):
    # b waits for the session's lock up to its consistency wait: long enough for the projector to be back
    (_, a), (_, b) = await servers(consistency_wait_s=5.0), await servers(consistency_wait_s=45.0)
    await a.setup_conversation("acme", "s")
    await a.peer("acme", "carol")
    add = sessions_pb2.AddMembersRequest(
        workspace_id="acme", session_id="s", members=[sessions_pb2.MemberSpec(peer_id="carol")]
    )
    second = await waiting_behind(
        projector,
        lambda: a.sessions.AddMembers(add, timeout=30),
        lambda: b.sessions.AddMembers(add, timeout=60),
        "it stands",
    )
    await rejected(second, grpc.StatusCode.ALREADY_EXISTS, "already members")
    with sync_engine(settings.database).connect() as conn:
        joins = conn.scalar(
            select(func.count()).where(memberships.c.session_id == "s", memberships.c.peer_id == "carol")
        )
    assert joins == 1  # carol joined once, not twice


async def test_a_clone_whose_caller_gives_up_mid_append_still_holds_its_id_so_a_second_is_refused(
    settings,
    servers,  # noqa: F811
    projector,
):
    (a_server, a), (_, b) = await servers(consistency_wait_s=2.0), await servers(consistency_wait_s=2.0)
    await a.setup_conversation("acme", "src")
    await a.list_messages("acme", "src", (await a.add("acme", "src", [("alice", "one")])).consistency_token)
    clone = sessions_pb2.CloneSessionRequest(workspace_id="acme", session_id="src", new_session_id="copy")
    commit = a_server.ctx.log._commit

    def slow_broker(producer, unanswered):  # the client's deadline falls inside the commit, which then goes through
        time.sleep(1.0)
        return commit(producer, unanswered)

    a_server.ctx.log._commit = slow_broker
    projector.stop()
    try:
        await rejected(a.sessions.CloneSession(clone, timeout=0.5), grpc.StatusCode.DEADLINE_EXCEEDED)
        await asyncio.sleep(1.0)  # the first clone is on the log by now, not readable
        await rejected(b.sessions.CloneSession(clone, timeout=30), grpc.StatusCode.UNAVAILABLE, "nothing was written")
    finally:
        projector.start()
    await rejected(settled(lambda: b.sessions.CloneSession(clone, timeout=30)), grpc.StatusCode.ALREADY_EXISTS)
    assert [m.content for m in await a.all_messages("acme", "copy")] == ["one"]  # copied once


async def test_a_second_write_of_a_message_id_still_held_is_told_it_appended_nothing_and_never_lands(
    settings,
    servers,  # noqa: F811
    projector,
):
    (_, a), (_, b) = await servers(consistency_wait_s=5.0), await servers(consistency_wait_s=2.0)
    await a.setup_conversation("acme", "s", peers=("alice",))

    def add(content: str) -> messages_pb2.AddMessagesRequest:
        new = messages_pb2.NewMessage(peer_id="alice", content=content, message_id="m-1")
        return messages_pb2.AddMessagesRequest(workspace_id="acme", session_id="s", messages=[new])

    projector.stop()
    try:
        first = asyncio.ensure_future(a.messages.AddMessages(add("first"), timeout=30))
        await asyncio.sleep(0.5)
        await rejected(
            b.messages.AddMessages(add("second"), timeout=30), grpc.StatusCode.UNAVAILABLE, "appended nothing"
        )
        await rejected(first, grpc.StatusCode.UNAVAILABLE, "is on the log", "it stands")
    finally:
        projector.start()
    listed = await until(lambda: a.list_messages("acme", "s"), lambda got: len(got.messages) == 1)
    assert [m.content for m in listed.messages] == ["first"]
    await asyncio.sleep(1.0)  # the second, given up, appends nothing later
    assert [m.content for m in (await a.list_messages("acme", "s")).messages] == ["first"]


async def test_a_get_or_create_behind_a_write_that_stands_waits_for_it_rather_than_answering_from_before_it(
    settings,
    servers,  # noqa: F811
    projector,
):
    _, a = await servers(consistency_wait_s=1.0)
    await a.setup_conversation("w", "s", peers=("alice", "bob"))
    remove = sessions_pb2.RemoveMembersRequest(workspace_id="w", session_id="s", peer_ids=["bob"])
    projector.stop()
    try:
        await rejected(a.sessions.RemoveMembers(remove), grpc.StatusCode.UNAVAILABLE, "it stands")
        # asked after the removal was answered: no OK read from before it, which would drop bob's join
        await rejected(a.session("w", "s", members=["bob"]), grpc.StatusCode.UNAVAILABLE, "nothing was written")
    finally:
        projector.start()
    again = await settled(lambda: a.session("w", "s", members=["bob"]))  # the removal readable: bob joins again
    assert sorted(m.peer_id for m in again.session.memberships if not m.HasField("left_at")) == ["alice", "bob"]
