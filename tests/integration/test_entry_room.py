"""Ids too long together for an entry of the covering indexes are refused before anything is written: a
session's messages (workspace, session, message id), a member's observations about itself (workspace, its id
twice, an observation id). Postgres refused such rows, so an acknowledged observation was parked in
quarantine and a message went without a vector."""

from __future__ import annotations

import random

import grpc

from peerlog.v1 import messages_pb2, sessions_pb2
from projections.schema import ENTRY_ID_BYTES
from services.cli.client import Client
from tests.integration.test_bad_input import quarantined
from tests.support.rpc import rejected

UUID = 36  # the length of an id peerlog assigns


def random_id(n: int, rng: random.Random) -> str:
    return rng.randbytes(n).hex()[:n]  # hex: incompressible enough that Postgres cannot shrink the entry


async def test_a_session_whose_messages_ids_would_not_fit_their_index_entry_is_refused_and_not_created(channel):
    rng, c = random.Random(1), Client(channel)
    workspace = random_id(512, rng)
    await c.workspace(workspace)
    session = random_id(ENTRY_ID_BYTES - 512 - UUID + 1, rng)
    await rejected(c.session(workspace, session), grpc.StatusCode.INVALID_ARGUMENT, "a message's index entry")
    await rejected(
        c.sessions.GetSession(sessions_pb2.GetSessionRequest(workspace_id=workspace, session_id=session)),
        grpc.StatusCode.NOT_FOUND,
    )
    await c.session(workspace, session[:-1])  # one shorter fits


async def test_a_member_whose_own_pair_would_not_fit_an_observations_entry_is_refused(channel, settings):
    rng, c = random.Random(2), Client(channel)
    await c.workspace("w")
    longest = (ENTRY_ID_BYTES - len("w") - UUID) // 2
    too_long, fits = random_id(longest + 1, rng), random_id(longest, rng)
    for peer in (too_long, fits):
        await c.peer("w", peer)
    await rejected(c.session("w", "s", members=[too_long]), grpc.StatusCode.INVALID_ARGUMENT, "twice (its own pair)")
    await c.session("w", "s", members=[fits])
    add = sessions_pb2.AddMembersRequest(
        workspace_id="w", session_id="s", members=[sessions_pb2.MemberSpec(peer_id=too_long)]
    )
    await rejected(c.sessions.AddMembers(add), grpc.StatusCode.INVALID_ARGUMENT, "an observation's index entry")
    made = await c.create_observations("w", fits, fits, ["keeps bees"])  # its own pair, at the longest
    assert [o.content for o in await c.all_observations("w", fits, fits, made.consistency_token)] == ["keeps bees"]
    assert quarantined(settings) == 0


async def test_a_client_message_id_too_long_for_its_index_entry_is_refused_and_nothing_written(channel):
    rng, c = random.Random(3), Client(channel)
    session = random_id(512, rng)
    await c.setup_conversation("w", session, peers=("alice",))
    mine = random_id(ENTRY_ID_BYTES - len("w") - len(session) + 1, rng)
    new = messages_pb2.NewMessage(peer_id="alice", content="hi", message_id=mine)
    add = messages_pb2.AddMessagesRequest(workspace_id="w", session_id=session, messages=[new])
    await rejected(c.messages.AddMessages(add), grpc.StatusCode.INVALID_ARGUMENT, "the message id")
    sent = await c.add("w", session, [("alice", "hello")])
    assert [m.content for m in (await c.list_messages("w", session, sent.consistency_token)).messages] == ["hello"]
