"""A client writes through the gRPC API and reads its own writes back from the projections."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf import struct_pb2, timestamp_pb2

from peerlog.v1 import common_pb2, messages_pb2, peers_pb2, sessions_pb2, workspaces_pb2
from services.api.validation import MAX_PAGE_BYTES
from services.cli.client import Client


async def test_added_messages_read_back_in_order_with_a_per_session_sequence(channel):
    c = Client(channel)
    await c.setup_conversation("acme", "s1")
    first = await c.add("acme", "s1", [("alice", "hi bob"), ("bob", "hi alice")])
    second = await c.add("acme", "s1", [("alice", "how was the trip to Lisbon?")])

    got = await c.list_messages("acme", "s1", token=second.consistency_token)

    assert [m.content for m in got.messages] == ["hi bob", "hi alice", "how was the trip to Lisbon?"]
    assert [m.seq for m in got.messages] == [1, 2, 3]
    assert [m.message_id for m in got.messages] == [*first.message_ids, *second.message_ids]
    assert [m.peer_id for m in got.messages] == ["alice", "bob", "alice"]


async def test_a_read_carrying_the_write_token_sees_the_write_immediately(channel):
    c = Client(channel)
    await c.setup_conversation("acme", "s1")
    for i in range(5):
        resp = await c.add("acme", "s1", [("alice", f"turn {i}")])
        msg = await c.messages.GetMessage(
            messages_pb2.GetMessageRequest(
                workspace_id="acme",
                message_id=resp.message_ids[0],
                consistency=common_pb2.ReadConsistency(consistency_token=resp.consistency_token),
            )
        )
        assert msg.content == f"turn {i}"


async def test_get_or_create_returns_the_existing_entity_the_second_time(channel):
    c = Client(channel)
    first = await c.workspace("acme")
    again = await c.workspace("acme")
    assert first.created and not again.created
    assert again.workspace.created_at == first.workspace.created_at

    p1 = await c.peer("acme", "alice")
    p2 = await c.peer("acme", "alice")
    assert p1.created and not p2.created and p2.peer.observe_me is True

    s1 = await c.session("acme", "s1", members=["alice"])
    s2 = await c.session("acme", "s1", members=["alice"])
    assert s1.created and not s2.created
    assert len(s2.session.memberships) == 1


async def test_peer_observe_me_can_be_turned_off_and_is_remembered(channel):
    c = Client(channel)
    await c.workspace("acme")
    await c.peer("acme", "bot", observe_me=False)
    got = await c.peers.GetPeer(peers_pb2.GetPeerRequest(workspace_id="acme", peer_id="bot"))
    assert got.observe_me is False
    changed = await c.peer("acme", "bot", observe_me=True)
    assert changed.peer.observe_me is True and not changed.created


async def test_membership_history_keeps_join_and_leave_times(channel):
    c = Client(channel)
    await c.setup_conversation("acme", "s1", peers=("alice", "bob"))
    await c.sessions.RemoveMembers(
        sessions_pb2.RemoveMembersRequest(workspace_id="acme", session_id="s1", peer_ids=["bob"])
    )
    resp = await c.sessions.AddMembers(
        sessions_pb2.AddMembersRequest(
            workspace_id="acme",
            session_id="s1",
            members=[sessions_pb2.MemberSpec(peer_id="bob", observe_others=True)],
        )
    )
    periods = [(m.peer_id, m.HasField("left_at"), m.observe_others) for m in resp.session.memberships]
    assert periods == [("alice", False, False), ("bob", True, False), ("bob", False, True)]
    bob_left = resp.session.memberships[1]
    assert bob_left.left_at.ToDatetime() >= bob_left.joined_at.ToDatetime()


async def test_a_session_whose_members_come_and_go_shows_its_current_and_newest_past_periods(channel, monkeypatch):
    from services.api import convert

    monkeypatch.setattr(convert, "MEMBERSHIPS_SHOWN", 4)  # 1,000 in service: a reply stays far under 4 MiB
    c = Client(channel)
    await c.setup_conversation("acme", "s1", peers=("alice", "bob"))
    for _ in range(3):  # bob leaves and comes back three times
        remove = sessions_pb2.RemoveMembersRequest(workspace_id="acme", session_id="s1", peer_ids=["bob"])
        await c.sessions.RemoveMembers(remove)
        add = sessions_pb2.AddMembersRequest(
            workspace_id="acme", session_id="s1", members=[sessions_pb2.MemberSpec(peer_id="bob")]
        )
        session = (await c.sessions.AddMembers(add)).session
    assert session.membership_periods == 5  # alice's, and bob's four
    shown = [(m.peer_id, m.HasField("left_at")) for m in session.memberships]
    assert shown == [("alice", False), ("bob", True), ("bob", True), ("bob", False)]  # the oldest past one left out
    got = await c.sessions.GetSession(sessions_pb2.GetSessionRequest(workspace_id="acme", session_id="s1"))
    assert got.membership_periods == 5 and len(got.memberships) == 4


async def test_backfilled_messages_keep_the_client_timestamp_and_metadata(channel):
    c = Client(channel)
    await c.setup_conversation("acme", "s1")
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(when)
    msg = messages_pb2.NewMessage(peer_id="alice", content="old news", created_at=ts)
    msg.metadata.update({"source": "import", "n": 3})
    resp = await c.add("acme", "s1", [msg])
    got = (await c.list_messages("acme", "s1", token=resp.consistency_token)).messages[0]
    assert got.created_at.ToDatetime(tzinfo=UTC) == when
    assert dict(got.metadata) == {"source": "import", "n": 3}


async def test_paging_returns_every_message_exactly_once_in_both_directions(channel):
    c = Client(channel)
    await c.setup_conversation("acme", "s1")
    token = ""
    for batch in range(3):
        resp = await c.add("acme", "s1", [("alice", f"m{batch}-{i}") for i in range(40)])
        token = resp.consistency_token
    forward = await c.all_messages("acme", "s1", token=token, page_size=7)
    assert [m.seq for m in forward] == list(range(1, 121))

    backward, page_token = [], ""
    while True:
        resp = await c.list_messages("acme", "s1", page_size=50, page_token=page_token, reverse=True)
        backward += resp.messages
        page_token = resp.next_page_token
        if not page_token:
            break
    assert [m.seq for m in backward] == list(range(120, 0, -1))


async def test_add_messages_at_the_documented_maximum_is_received_not_resource_exhausted(channel):
    # 100 messages of 25,000 four-byte characters (10 MB) are within the documented limits; the server's
    # receive limit was gRPC's default 4 MiB
    c = Client(channel)
    await c.setup_conversation("acme", "s1")
    sent = await c.add("acme", "s1", [("alice", f"{i:03} " + "𝄞" * 24_996) for i in range(100)])
    assert len(sent.message_ids) == 100
    got = await c.messages.GetMessage(
        messages_pb2.GetMessageRequest(
            workspace_id="acme",
            message_id=sent.message_ids[99],
            consistency=common_pb2.ReadConsistency(consistency_token=sent.consistency_token),
        )
    )
    assert got.content == "099 " + "𝄞" * 24_996


async def test_a_page_of_large_messages_is_cut_short_to_fit_a_default_client(channel):
    # page_size 1000 over 100 messages of 75 KB each was one 7.5 MB reply, over a default client's 4 MiB
    c = Client(channel)  # a default client
    await c.setup_conversation("acme", "s1")
    ids, token = [], ""
    for batch in range(2):  # each call under the default 4 MiB the client sends
        sent = await c.add("acme", "s1", [("alice", f"{batch}-{i:02} " + "€" * 24_990) for i in range(50)])
        ids, token = ids + list(sent.message_ids), sent.consistency_token
    for reverse in (False, True):
        pages, page_token = [], ""
        while True:
            resp = await c.list_messages("acme", "s1", token, page_size=1000, page_token=page_token, reverse=reverse)
            pages.append(resp)
            page_token = resp.next_page_token
            if not page_token:
                break
        assert [m.message_id for p in pages for m in p.messages] == (ids[::-1] if reverse else ids)
        assert len(pages) == 3 and all(p.ByteSize() <= MAX_PAGE_BYTES for p in pages)


async def test_a_page_of_messages_with_large_metadata_is_cut_in_postgres_not_after_reading_every_row(channel):
    # ListMessages read page_size whole rows and cut the reply only once their metadata was decoded: 300
    # messages with metadata of [{}, {}, …] (60 KB as JSON, 1.45 MB as Python objects) took 445 MB and a
    # 2.5 s stall of the server's event loop to return 9 of them
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    c = Client(channel)
    await c.setup_conversation("acme", "s1")
    metadata = struct_pb2.Struct()
    metadata.update({"note": "x" * 60_000})  # as large, cheaper to convert: the rows read are what counts
    ids, token = [], ""
    for batch in range(5):  # each call under the default 4 MiB the client sends
        sent = await c.add("acme", "s1", [_turn(f"{batch}-{i:02}", metadata) for i in range(40)])
        ids, token = ids + list(sent.message_ids), sent.consistency_token

    read: list[int] = []  # rows of messages (with content and metadata) fetched from Postgres

    def count(conn, cursor, statement, parameters, context, executemany):
        if {"content", "metadata"} <= {d[0] for d in cursor.description or ()}:
            read.append(cursor.rowcount)

    for reverse in (False, True):
        event.listen(Engine, "after_cursor_execute", count)
        try:
            pages = [await c.list_messages("acme", "s1", token, page_size=1000, reverse=reverse)]
        finally:
            event.remove(Engine, "after_cursor_execute", count)
        returned = len(pages[0].messages)
        assert 0 < returned < len(ids) and sum(read) <= returned + 1
        read.clear()
        while page_token := pages[-1].next_page_token:
            pages.append(
                await c.list_messages("acme", "s1", token, page_size=1000, page_token=page_token, reverse=reverse)
            )
        assert [m.message_id for p in pages for m in p.messages] == (ids[::-1] if reverse else ids)
        assert all(p.ByteSize() < 4 * 1024 * 1024 for p in pages)
        assert all(m.metadata == metadata for p in pages for m in p.messages)


def _turn(content: str, metadata: struct_pb2.Struct) -> messages_pb2.NewMessage:
    return messages_pb2.NewMessage(peer_id="alice", content=content, metadata=metadata)


async def test_lists_are_scoped_to_their_workspace(channel):
    c = Client(channel)
    await c.setup_conversation("acme", "s1", peers=("alice",))
    await c.setup_conversation("globex", "s2", peers=("zed",))
    peers = await c.peers.ListPeers(peers_pb2.ListPeersRequest(workspace_id="acme"))
    assert [p.peer_id for p in peers.peers] == ["alice"]
    sessions = await c.sessions.ListSessions(sessions_pb2.ListSessionsRequest(workspace_id="globex"))
    assert [s.session_id for s in sessions.sessions] == ["s2"]
    spaces = await c.workspaces.ListWorkspaces(workspaces_pb2.ListWorkspacesRequest())
    assert [w.workspace_id for w in spaces.workspaces] == ["acme", "globex"]


async def test_more_members_than_a_session_holds_in_one_request_are_refused_not_taken_for_an_outage(channel):
    # 70,000 ids were looked up at once: past Postgres's 65,535 parameters, answered UNAVAILABLE ("retry later")
    import grpc

    from services.api.writes import MAX_MEMBERS
    from tests.support.rpc import rejected

    c = Client(channel)
    await c.workspace("w")
    await c.peer("w", "alice")
    made = await c.session("w", "s", members=["alice"])
    specs = [sessions_pb2.MemberSpec(peer_id=f"p{i}") for i in range(70_000)]
    for call in (
        c.sessions.GetOrCreateSession(
            sessions_pb2.GetOrCreateSessionRequest(workspace_id="w", session_id="s2", members=specs)
        ),
        c.sessions.AddMembers(sessions_pb2.AddMembersRequest(workspace_id="w", session_id="s", members=specs)),
    ):
        await rejected(call, grpc.StatusCode.FAILED_PRECONDITION, f"holds at most {MAX_MEMBERS}")
    got = await c.sessions.GetSession(
        sessions_pb2.GetSessionRequest(
            workspace_id="w",
            session_id="s",
            consistency=common_pb2.ReadConsistency(consistency_token=made.consistency_token),
        )
    )
    assert [m.peer_id for m in got.memberships] == ["alice"]


async def test_a_session_at_its_member_cap_refuses_another_member_and_writes_nothing(channel):
    import grpc

    from services.api.writes import MAX_MEMBERS
    from tests.support.rpc import rejected

    c = Client(channel)
    await c.workspace("w")
    peers = [f"p{i}" for i in range(MAX_MEMBERS + 2)]
    for p in peers:
        await c.peer("w", p)
    await c.session("w", "s", members=peers[:100])  # the most one request names
    for start in range(100, MAX_MEMBERS, 100):
        specs = [sessions_pb2.MemberSpec(peer_id=p) for p in peers[start : start + 100]]
        await c.sessions.AddMembers(sessions_pb2.AddMembersRequest(workspace_id="w", session_id="s", members=specs))
    over = [sessions_pb2.MemberSpec(peer_id=p) for p in peers[MAX_MEMBERS:]]
    await rejected(
        c.sessions.AddMembers(sessions_pb2.AddMembersRequest(workspace_id="w", session_id="s", members=over)),
        grpc.StatusCode.FAILED_PRECONDITION,
        f"has {MAX_MEMBERS} current member(s) and 2 would join",
    )
    await rejected(
        c.session("w", "s", members=[peers[-1]]), grpc.StatusCode.FAILED_PRECONDITION, "remove members first"
    )
    got = await c.sessions.GetSession(sessions_pb2.GetSessionRequest(workspace_id="w", session_id="s"))
    assert len([m for m in got.memberships if not m.HasField("left_at")]) == MAX_MEMBERS
