"""as_of on GetContext, ListObservations, SearchObservations and Chat: each answers from what the log said
at that time (real Kafka and Postgres; Chat talks to the HTTP test model server).

Before `then`: bob says he lives in Oslo, alice records it (and that he keeps bees) and puts it on her card.
After it: he says he moved to Bergen, alice records that, deletes Oslo, rewrites the card, and the session
turns the peer card off.

Then what was recorded after `then` but looks older: a reinforcement's new source, a clone's copies and a
backfilled message (created_at set by the client) stay out of every read as of `then`.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf import timestamp_pb2

from peerlog.v1 import configuration_pb2 as cfg
from peerlog.v1 import (
    configuration_pb2_grpc,
    context_pb2,
    context_pb2_grpc,
    dialectic_pb2_grpc,
    messages_pb2,
    peers_pb2,
    sessions_pb2,
)
from peerlog.v1 import dialectic_pb2 as d
from peerlog.v1 import observations_pb2 as o
from services.cli.client import Client
from services.events import ObservationReinforced, ProducerInfo, Source
from tests.integration.test_chat import (
    call,
    serve,  # noqa: F401 - the fixture: an API whose Chat uses the test model
    tool_messages,
)
from tests.support.model_server import Reply
from tests.support.observations import append


def stamp(at: datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(at)
    return out


def explicit(content: str, message_id: str, span: str) -> o.NewObservation:
    return o.NewObservation(
        content=content, session_id="s", sources=[o.ObservationSource(message_id=message_id, span=span)]
    )


async def _before(c: Client) -> dict:
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    sent = await c.add("w", "s", [("bob", "I live in Oslo"), ("bob", "I keep bees")])
    await c.list_messages("w", "s", sent.consistency_token)  # observations may cite only projected messages
    oslo_msg, bees_msg = sent.message_ids
    made = await c.create_observations(
        "w",
        "alice",
        "bob",
        [explicit("Bob lives in Oslo", oslo_msg, "live in Oslo"), explicit("Bob keeps bees", bees_msg, "bees")],
    )
    await c.peers.SetPeerCard(
        peers_pb2.SetPeerCardRequest(
            workspace_id="w", observer_id="alice", observed_id="bob", entries=["ATTRIBUTE: lives in Oslo"]
        )
    )
    await c.all_observations("w", "alice", "bob", made.consistency_token)
    oslo, bees = made.observation_ids
    return {"oslo_msg": oslo_msg, "oslo": oslo, "bees": bees}


async def _after(c: Client, chan) -> dict:
    sent = await c.add("w", "s", [("bob", "I moved to Bergen")])
    await c.list_messages("w", "s", sent.consistency_token)
    made = await c.create_observations(
        "w", "alice", "bob", [explicit("Bob lives in Bergen", sent.message_ids[0], "moved to Bergen")]
    )
    await c.peers.SetPeerCard(
        peers_pb2.SetPeerCardRequest(
            workspace_id="w", observer_id="alice", observed_id="bob", entries=["ATTRIBUTE: lives in Bergen"]
        )
    )
    await configuration_pb2_grpc.ConfigurationServiceStub(chan).SetSessionConfiguration(
        cfg.SetSessionConfigurationRequest(
            workspace_id="w", session_id="s", configuration=cfg.Configuration(peer_card=False)
        )
    )
    return {"bergen_msg": sent.message_ids[0], "bergen": made.observation_ids[0]}


@pytest.fixture
async def history(serve):  # noqa: F811 - the imported fixture
    chan = await serve()
    c = Client(chan)
    ids = await _before(c)
    await asyncio.sleep(0.05)  # `then` falls strictly between the two phases' recorded times
    then = datetime.now(UTC)
    await asyncio.sleep(0.05)
    ids |= await _after(c, chan)
    deleted = await c.delete_observation("w", ids["oslo"], reason="bob moved")
    # every later event is projected before the reads, so only as_of can hide it
    await c.all_observations("w", "alice", "bob", deleted.consistency_token)
    return {"chan": chan, "client": c, "then": stamp(then), **ids}


def texts(context: context_pb2.GetContextResponse) -> set[str]:
    return {m.content for m in context.messages} | {m.content for m in context.relevant_messages}


async def test_get_context_as_of_answers_with_the_messages_store_card_and_configuration_of_then(history):
    stub = context_pb2_grpc.ContextServiceStub(history["chan"])
    base = {
        "workspace_id": "w",
        "session_id": "s",
        "observer_id": "alice",
        "target_id": "bob",
        "search_query": "where does Bob live",
    }
    now = await stub.GetContext(context_pb2.GetContextRequest(**base))
    then = await stub.GetContext(context_pb2.GetContextRequest(**base, as_of=history["then"]))

    # the turns, recent or relevant to the query (a relevant one is not repeated among the recent)
    assert texts(then) == {"I live in Oslo", "I keep bees"}
    assert "I moved to Bergen" in texts(now)
    assert {x.observation_id for x in then.observations} == {history["oslo"], history["bees"]}
    assert {x.observation_id for x in now.observations} == {history["bees"], history["bergen"]}
    # the card as it stood, under the configuration in force then (the session turned cards off later)
    assert (list(then.peer_card), list(now.peer_card)) == (["ATTRIBUTE: lives in Oslo"], [])


async def test_list_observations_as_of_shows_the_store_and_each_row_as_they_stood(history):
    c, then = history["client"], history["then"]
    past = await c.all_observations("w", "alice", "bob", as_of=then)
    assert [x.observation_id for x in past] == [history["oslo"], history["bees"]]
    assert not past[0].HasField("deleted_at") and past[0].delete_reason == ""  # deleted only later
    now = await c.all_observations("w", "alice", "bob", include_deleted=True)
    oslo_now = next(x for x in now if x.observation_id == history["oslo"])
    assert oslo_now.HasField("deleted_at") and oslo_now.delete_reason == "bob moved"
    early = await c.all_observations("w", "alice", "bob", as_of=timestamp_pb2.Timestamp(seconds=0))
    assert early == []


async def test_search_observations_as_of_searches_the_store_of_then(history):
    c, then = history["client"], history["then"]
    past = await c.search_observations("w", "alice", "bob", "Where does Bob live?", as_of=then)
    now = await c.search_observations("w", "alice", "bob", "Where does Bob live?")
    assert {r.observation.observation_id for r in past.results} == {history["oslo"], history["bees"]}
    assert {r.observation.observation_id for r in now.results} == {history["bees"], history["bergen"]}


def _grep(pattern: str) -> Reply:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "grep_messages", "arguments": json.dumps({"pattern": pattern})},
    }
    return Reply(tool_calls=[call])


async def test_chat_as_of_is_shown_only_the_memory_and_messages_of_then(history, model_server):
    model_server.script([_grep("Bergen")])
    model_server.reply_with(lambda req: Reply(content="Oslo"))
    out = await dialectic_pb2_grpc.DialecticServiceStub(history["chan"]).Chat(
        d.ChatRequest(
            workspace_id="w",
            observer_id="alice",
            target_id="bob",
            query="Where does Bob live?",
            session_id="s",
            as_of=history["then"],
        )
    )

    first, second = model_server.chat_requests()
    prompt = first["messages"][1]["content"]
    assert f"[obs:{history['oslo']}]" in prompt and f"[msg:{history['oslo_msg']}]" in prompt
    assert "Bergen" not in prompt
    assert [m["content"] for m in second["messages"] if m["role"] == "tool"] == ["No messages found."]
    assert out.answer == "Oslo"


DERIVER = ProducerInfo(component="deriver", version="0", model="test-model", prompt_version="v1")


async def _a_moment() -> datetime:
    """A time strictly between what was recorded before the call and what is recorded after it."""
    await asyncio.sleep(0.05)
    then = datetime.now(UTC)
    await asyncio.sleep(0.05)
    return then


async def _chat_as_of(chan, then: datetime, query: str) -> None:
    await dialectic_pb2_grpc.DialecticServiceStub(chan).Chat(
        d.ChatRequest(
            workspace_id="w", observer_id="alice", target_id="bob", query=query, session_id="s", as_of=stamp(then)
        )
    )


async def test_an_as_of_read_shows_only_the_sources_recorded_by_then(serve, settings, model_server):  # noqa: F811
    chan = await serve()
    c = Client(chan)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    sent = await c.add("w", "s", [("bob", "I live in Oslo")])
    await c.list_messages("w", "s", sent.consistency_token)
    first = sent.message_ids[0]
    made = await c.create_observations("w", "alice", "bob", [explicit("Bob lives in Oslo", first, "live in Oslo")])
    (oslo,) = made.observation_ids
    await c.all_observations("w", "alice", "bob", made.consistency_token)
    then = await _a_moment()
    # later bob says it again, and the deriver reinforces the observation citing the new message
    later = await c.add("w", "s", [("bob", "Yes, I still live in Oslo")])
    await c.list_messages("w", "s", later.consistency_token)
    again = later.message_ids[0]
    reinforced = ObservationReinforced(
        workspace_id="w",
        observer_id="alice",
        observed_id="bob",
        observation_id=oslo,
        sources=(Source(message_id=again, span="I still live in Oslo"),),
        batch_id="b-later",
        producer=DERIVER,
    )
    now = await c.all_observations("w", "alice", "bob", append(settings, [reinforced]))
    assert [(x.times_derived, [s.message_id for s in x.sources]) for x in now] == [(2, [first, again])]

    (past,) = await c.all_observations("w", "alice", "bob", as_of=stamp(then))
    assert (past.times_derived, [s.message_id for s in past.sources]) == (1, [first])
    found = await c.search_observations("w", "alice", "bob", "Where does Bob live?", as_of=stamp(then))
    assert [[s.message_id for s in r.observation.sources] for r in found.results] == [[first]]
    # Chat's source_messages tool, as of then, reads the same sources
    model_server.script([Reply(tool_calls=[call("source_messages", observation_id=oslo)])])
    model_server.reply_with(lambda req: Reply(content="Oslo"))
    await _chat_as_of(chan, then, "Where does Bob live?")
    (shown,) = tool_messages(model_server.chat_requests()[1])
    assert f"[msg:{first}]" in shown and again not in shown


async def test_an_as_of_read_leaves_out_messages_recorded_after_it_whatever_their_created_at(
    serve,  # noqa: F811
    model_server,
):
    chan = await serve()
    c = Client(chan)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    sent = await c.add("w", "s", [("bob", "I keep two hives of bees")])
    await c.list_messages("w", "s", sent.consistency_token)
    (original,) = sent.message_ids
    then = await _a_moment()
    # recorded after `then`, each created before it: a clone's copy keeps its original's created_at, and a
    # backfill sets its own
    cloned = await c.sessions.CloneSession(
        sessions_pb2.CloneSessionRequest(workspace_id="w", session_id="s", new_session_id="copy")
    )
    copied = await c.list_messages("w", "copy", cloned.consistency_token)
    (copy,) = [m.message_id for m in copied.messages]
    old = stamp(then - timedelta(minutes=5))
    backfill = await c.add(
        "w", "s", [messages_pb2.NewMessage(peer_id="bob", content="My bees make honey", created_at=old)]
    )
    await c.list_messages("w", "s", backfill.consistency_token)
    (backfilled,) = backfill.message_ids

    stub = context_pb2_grpc.ContextServiceStub(chan)
    base = {"workspace_id": "w", "observer_id": "alice", "target_id": "bob", "as_of": stamp(then)}
    of_copy = await stub.GetContext(context_pb2.GetContextRequest(**base, session_id="copy"))
    assert list(of_copy.messages) == []  # the clone did not exist then
    of_s = await stub.GetContext(context_pb2.GetContextRequest(**base, session_id="s", search_query="bees hives"))
    shown = [m.message_id for m in of_s.messages] + [m.message_id for m in of_s.relevant_messages]
    assert shown == [original]
    # Chat's message tools, as of then, read the same messages
    model_server.script(
        [
            Reply(
                tool_calls=[
                    call("grep_messages", "c1", pattern="bees"),
                    call("search_messages", "c2", query="bees hives honey"),
                    call("messages_by_date_range", "c3"),
                ]
            )
        ]
    )
    model_server.reply_with(lambda req: Reply(content="bees"))
    await _chat_as_of(chan, then, "What does Bob keep?")
    first, second = model_server.chat_requests()
    assert copy not in first["messages"][1]["content"] and backfilled not in first["messages"][1]["content"]
    for found in tool_messages(second):
        assert f"[msg:{original}]" in found and copy not in found and backfilled not in found, found


async def test_an_as_of_in_the_future_reads_as_now(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    ahead = messages_pb2.NewMessage(peer_id="bob", content="dated half an hour ahead")
    ahead.created_at.FromDatetime(datetime.now(UTC) + timedelta(minutes=30))  # allowed: under an hour
    token = (await c.add("w", "s", [("bob", "plain"), ahead])).consistency_token
    context = context_pb2_grpc.ContextServiceStub(channel)

    async def read(**kw) -> list[str]:
        got = await context.GetContext(
            context_pb2.GetContextRequest(
                workspace_id="w", session_id="s", observer_id="alice", consistency={"consistency_token": token}, **kw
            )
        )
        return [m.content for m in got.messages]

    now = await read()
    assert now == ["plain", "dated half an hour ahead"]
    assert await read(as_of=stamp(datetime.now(UTC) + timedelta(minutes=5))) == now
