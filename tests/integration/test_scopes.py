"""Scopes (issue 13 §1) on real Kafka and Postgres: a scope bounds each of the five reads as its sessions
would, an empty scope returns nothing, as_of sees the scope as it stood, a rebuild reproduces it, and bad
input gets a clear status with nothing written. Chat talks to the HTTP test model server.

The store (alice about bob): oslo (learnt in s1), bees (s2), sea (s3); derived, as the dreamer writes them:
norway <- oslo, bees_in_norway <- oslo + bees. Scope "north" holds s1 only.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import grpc
import pytest
from google.protobuf import timestamp_pb2

from peerlog.v1 import (
    common_pb2,
    context_pb2,
    context_pb2_grpc,
    dialectic_pb2,
    dialectic_pb2_grpc,
    peers_pb2,
    scopes_pb2,
    scopes_pb2_grpc,
    workspaces_pb2,
)
from peerlog.v1 import observations_pb2 as o
from projections.db import sync_engine
from projections.rebuild import rebuild
from services.cli.client import Client
from services.events import Level, ObservationAdded, ObservationReinforced, ProducerInfo, Source
from services.llm.embeddings import make_embedder
from services.llm.settings import EmbeddingSettings
from tests.integration.test_chat import serve  # noqa: F401 - the fixture: an API whose Chat uses the test model
from tests.support.model_server import Reply
from tests.support.observations import append
from tests.support.observations import derived as derived_observation

WHERE = "Where does Bob live, and does he keep bees by the sea in Oslo?"


def stamp(at: datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(at)
    return out


async def derived(obs_id: str, content: str, premises: list[str]) -> ObservationAdded:
    """A deduction as the dreamer writes it: with the vector of the deployment's embedding model, so the
    searches can find it."""
    embedder = make_embedder(EmbeddingSettings())
    (vector,) = await embedder.embed([content])
    return derived_observation(
        obs_id, Level.DEDUCTIVE, content, premises, embedding=tuple(vector), embedding_model=EmbeddingSettings().model
    )


async def _explicit(c: Client, session: str, text: str, span: str) -> str:
    sent = await c.add("w", session, [("bob", text)])
    await c.list_messages("w", session, sent.consistency_token)  # an observation may cite only projected messages
    made = await c.create_observations(
        "w",
        "alice",
        "bob",
        [
            o.NewObservation(
                content=f"Bob: {text}",
                session_id=session,
                sources=[o.ObservationSource(message_id=sent.message_ids[0], span=span)],
            )
        ],
    )
    return made.observation_ids[0]


async def _store(c: Client, settings) -> tuple[dict, str]:
    await c.setup_conversation("w", "s1", peers=("alice", "bob"))
    for s in ("s2", "s3"):
        await c.session("w", s, members=("alice", "bob"))
    ids = {
        "oslo": await _explicit(c, "s1", "I live in Oslo", "Oslo"),
        "bees": await _explicit(c, "s2", "I keep bees", "bees"),
        "sea": await _explicit(c, "s3", "I swim in the sea near Oslo every day", "sea"),
    }
    token = append(
        settings,
        [
            await derived("norway", "Bob lives in Norway", [ids["oslo"]]),
            await derived("bees_in_norway", "Bob keeps bees in Norway", [ids["oslo"], ids["bees"]]),
        ],
    )
    await c.all_observations("w", "alice", "bob", token)
    return ids, token


@pytest.fixture
async def world(serve, settings):  # noqa: F811 - the imported fixture
    chan = await serve()
    c = Client(chan)
    ids, token = await _store(c, settings)
    scopes = scopes_pb2_grpc.ScopeServiceStub(chan)
    north = await scopes.CreateScope(
        scopes_pb2.CreateScopeRequest(workspace_id="w", scope_id="north", name="Bob up north", session_ids=["s1"])
    )
    empty = await scopes.CreateScope(scopes_pb2.CreateScopeRequest(workspace_id="w", scope_id="empty"))
    assert list(north.scope.session_ids) == ["s1"] and list(empty.scope.session_ids) == []
    return {"chan": chan, "client": c, "scopes": scopes, "ids": ids, "token": token}


def _representation(world, **kw):
    return context_pb2_grpc.ContextServiceStub(world["chan"]).GetRepresentation(
        context_pb2.GetRepresentationRequest(workspace_id="w", observer_id="alice", target_id="bob", **kw)
    )


def _context(world, **kw):
    return context_pb2_grpc.ContextServiceStub(world["chan"]).GetContext(
        context_pb2.GetContextRequest(
            workspace_id="w", session_id="s2", observer_id="alice", target_id="bob", search_query=WHERE, **kw
        )
    )


def _search_workspace(world, **kw):
    return world["client"].workspaces.SearchMessages(
        workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="w", query=WHERE, **kw)
    )


def _search_peer(world, **kw):
    return world["client"].peers.SearchMessages(
        peers_pb2.SearchPeerMessagesRequest(workspace_id="w", peer_id="bob", query=WHERE, **kw)
    )


def _search_observations(world, **kw):
    return world["client"].observations.SearchObservations(
        o.SearchObservationsRequest(workspace_id="w", observer_id="alice", observed_id="bob", query=WHERE, **kw)
    )


def _ids(observations) -> set[str]:
    return {x.observation_id for x in observations}


async def test_a_scope_bounds_get_representation_to_its_sessions_and_the_conclusions_they_vouch_for(world):
    ids = world["ids"]
    everything = await _representation(world)
    assert _ids(everything.observations) == {ids["oslo"], ids["bees"], ids["sea"], "norway", "bees_in_norway"}
    north = await _representation(world, scope_id="north")
    # bees_in_norway also rests on bees (s2): withheld, as the session allowlist withholds it
    assert _ids(north.observations) == {ids["oslo"], "norway"}
    both = await _representation(world, scope_id="north", session_ids=["s1", "s2"])
    assert _ids(both.observations) == {ids["oslo"], "norway"}  # a scope and an allowlist: sessions in both


async def test_a_scope_bounds_get_context_representation_and_relevant_messages(world):
    ids = world["ids"]
    unbounded = await _context(world)
    assert "s3" in {m.session_id for m in unbounded.relevant_messages}  # the sea turn is relevant without a scope
    north = await _context(world, scope_id="north")
    assert _ids(north.observations) == {ids["oslo"], "norway"}
    assert {m.session_id for m in north.relevant_messages} == {"s1"}
    # the session being read (s2) is the conversation at hand, not recall: its turns stay
    assert [m.content for m in north.messages] == ["I keep bees"]


async def test_a_scope_bounds_search_observations(world):
    ids = world["ids"]
    unbounded = await _search_observations(world)
    assert {r.observation.observation_id for r in unbounded.results} == {
        ids["oslo"],
        ids["bees"],
        ids["sea"],
        "norway",
        "bees_in_norway",
    }
    north = await _search_observations(world, scope_id="north")
    assert {r.observation.observation_id for r in north.results} == {ids["oslo"], "norway"}


async def test_an_observation_found_under_a_scope_shows_no_source_from_a_session_outside_it(world, settings):
    """A deriver before stop 60 reinforced a client's observation from any session: the oslo fact (s1), said
    again in s3, got a source in s3, on the log for good. Under a scope of s1 it is shown with its s1 source
    only; without the scope, with both."""
    ids, c = world["ids"], world["client"]
    again = await c.add("w", "s3", [("bob", "Oslo is home")])
    await c.list_messages("w", "s3", again.consistency_token)
    token = append(
        settings,
        [
            ObservationReinforced(
                workspace_id="w",
                observer_id="alice",
                observed_id="bob",
                observation_id=ids["oslo"],
                sources=(Source(message_id=again.message_ids[0], span="Oslo is home"),),
                producer=ProducerInfo(component="test", version="0"),
            )
        ],
    )
    await c.all_observations("w", "alice", "bob", token)

    def cited(reply) -> list[str]:
        (oslo,) = [r.observation for r in reply.results if r.observation.observation_id == ids["oslo"]]
        return sorted(s.span for s in oslo.sources)

    assert cited(await _search_observations(world)) == ["Oslo", "Oslo is home"]
    assert cited(await _search_observations(world, scope_id="north")) == ["Oslo"]


async def test_a_scope_bounds_workspace_and_peer_search_messages(world):
    for search in (_search_workspace, _search_peer):
        unbounded = await search(world)
        assert {r.message.session_id for r in unbounded.results} == {"s1", "s2", "s3"}
        north = await search(world, scope_id="north")
        assert [r.message.content for r in north.results] == ["I live in Oslo"]
        # narrowed by an allowlist of other sessions, nothing is left
        assert list((await search(world, scope_id="north", session_ids=["s2"])).results) == []


def _grep(pattern: str) -> Reply:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "grep_messages", "arguments": json.dumps({"pattern": pattern})},
    }
    return Reply(tool_calls=[call])


async def test_a_scope_bounds_chat_prefetch_and_its_message_tools(world, model_server):
    ids = world["ids"]
    model_server.script([_grep("sea")])
    model_server.reply_with(lambda req: Reply(content="Oslo"))
    out = await dialectic_pb2_grpc.DialecticServiceStub(world["chan"]).Chat(
        dialectic_pb2.ChatRequest(workspace_id="w", observer_id="alice", target_id="bob", query=WHERE, scope_id="north")
    )
    first, second = model_server.chat_requests()
    prompt = first["messages"][1]["content"]
    assert f"[obs:{ids['oslo']}]" in prompt and "[obs:norway]" in prompt
    assert ids["bees"] not in prompt and ids["sea"] not in prompt and "bees_in_norway" not in prompt
    # grep finds the sea turn without a scope; s3 is outside this one
    assert [m["content"] for m in second["messages"] if m["role"] == "tool"] == ["No messages found."]
    assert out.answer == "Oslo"


async def test_an_empty_scope_fails_closed_on_every_read(world, model_server):
    assert list((await _representation(world, scope_id="empty")).observations) == []
    ctx = await _context(world, scope_id="empty")
    assert list(ctx.observations) == [] and list(ctx.relevant_messages) == []
    assert list((await _search_observations(world, scope_id="empty")).results) == []
    assert list((await _search_workspace(world, scope_id="empty")).results) == []
    assert list((await _search_peer(world, scope_id="empty")).results) == []
    before = len(model_server.chat_requests())
    out = await dialectic_pb2_grpc.DialecticServiceStub(world["chan"]).Chat(
        dialectic_pb2.ChatRequest(workspace_id="w", observer_id="alice", target_id="bob", query=WHERE, scope_id="empty")
    )
    assert out.abstained and len(model_server.chat_requests()) == before  # nothing to answer from: no model call


async def _moved(world) -> tuple[timestamp_pb2.Timestamp, timestamp_pb2.Timestamp]:
    """north: s1 until `then`, s2 after it. Returns (a time before north existed, then)."""
    scopes = world["scopes"]
    await asyncio.sleep(0.05)
    then = datetime.now(UTC)
    await asyncio.sleep(0.05)
    await scopes.AddScopeSessions(
        scopes_pb2.AddScopeSessionsRequest(workspace_id="w", scope_id="north", session_ids=["s2"])
    )
    moved = await scopes.RemoveScopeSessions(
        scopes_pb2.RemoveScopeSessionsRequest(workspace_id="w", scope_id="north", session_ids=["s1"])
    )
    assert list(moved.scope.session_ids) == ["s2"] and moved.consistency_token
    return timestamp_pb2.Timestamp(seconds=0), stamp(then)


async def test_as_of_reads_see_the_scope_as_it_stood(world):
    ids, scopes = world["ids"], world["scopes"]
    before_it, then = await _moved(world)
    get = lambda **kw: scopes.GetScope(scopes_pb2.GetScopeRequest(workspace_id="w", scope_id="north", **kw))
    assert list((await get()).session_ids) == ["s2"]
    assert list((await get(as_of=then)).session_ids) == ["s1"]
    assert list((await get(as_of=before_it)).session_ids) == []
    assert _ids((await _representation(world, scope_id="north")).observations) == {ids["bees"]}
    assert _ids((await _representation(world, scope_id="north", as_of=then)).observations) == {ids["oslo"], "norway"}
    found = await _search_observations(world, scope_id="north", as_of=then)
    assert {r.observation.observation_id for r in found.results} == {ids["oslo"], "norway"}


async def test_a_rebuild_reproduces_the_scope_projection(world, settings):
    await _moved(world)
    listed = await world["scopes"].ListScopes(scopes_pb2.ListScopesRequest(workspace_id="w"))
    report = await asyncio.get_running_loop().run_in_executor(None, lambda: rebuild(settings, progress=print))
    assert report.switched
    tables = ("scopes", "scope_changes", "scope_members")
    assert all(report.differences[t] == 0 for t in tables), report.differences
    with sync_engine(settings.database).connect() as conn:
        from sqlalchemy import text

        changes = conn.execute(text(f'SELECT count(*) FROM "{report.retired}".scope_changes')).scalar_one()
        members = conn.execute(text(f'SELECT session_id FROM "{report.retired}".scope_members')).scalars().all()
    assert changes == 3  # s1 added at creation, s2 added, s1 removed: the comparison compared something
    assert members == ["s2"]
    assert await world["scopes"].ListScopes(scopes_pb2.ListScopesRequest(workspace_id="w")) == listed


async def _status(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value.code(), err.value.details()


async def test_bad_scope_requests_get_a_clear_status_and_write_nothing(world):
    scopes, bad, missing = world["scopes"], grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
    create = lambda **kw: scopes.CreateScope(scopes_pb2.CreateScopeRequest(**{"workspace_id": "w", **kw}))
    add = lambda **kw: scopes.AddScopeSessions(scopes_pb2.AddScopeSessionsRequest(**{"workspace_id": "w", **kw}))
    code, details = await _status(create(scope_id="no spaces"))
    assert code == bad and "scope_id 'no spaces' is not a valid id" in details
    assert (await _status(create(scope_id="north")))[0] == grpc.StatusCode.ALREADY_EXISTS
    code, details = await _status(create(scope_id="other", session_ids=["s1", "nope"]))
    assert code == missing and "'nope'" in details
    assert (await _status(create(scope_id="other", workspace_id="nowhere")))[0] == missing
    assert (await _status(create(scope_id="other", name="x" * 201)))[0] == bad
    assert (await _status(create(scope_id="other", session_ids=["s1", "s1"])))[0] == bad
    assert (await _status(add(scope_id="north", session_ids=[])))[0] == bad
    assert (await _status(add(scope_id="ghost", session_ids=["s1"])))[0] == missing
    assert (await _status(add(scope_id="north", session_ids=["nope"])))[0] == missing
    listed = await scopes.ListScopes(scopes_pb2.ListScopesRequest(workspace_id="w"))
    assert [(s.scope_id, list(s.session_ids)) for s in listed.scopes] == [("empty", []), ("north", ["s1"])]


async def test_create_scope_sent_again_unchanged_returns_the_scope(world, monkeypatch):
    from projections import scope_reads

    scopes = world["scopes"]
    create = lambda **kw: scopes.CreateScope(scopes_pb2.CreateScopeRequest(**{"workspace_id": "w", **kw}))
    first = await create(scope_id="south", name="Bob down south", session_ids=["s3", "s2"])
    again = await create(scope_id="south", name="Bob down south", session_ids=["s2", "s3"])
    assert again.scope == first.scope and list(again.scope.session_ids) == ["s2", "s3"]
    # compared with the scope as created, not as it stands now; the reply shows it as it stands now
    await scopes.RemoveScopeSessions(
        scopes_pb2.RemoveScopeSessionsRequest(workspace_id="w", scope_id="south", session_ids=["s3"])
    )
    again = await create(scope_id="south", name="Bob down south", session_ids=["s3", "s2"])
    assert again.scope.created_at == first.scope.created_at and list(again.scope.session_ids) == ["s2"]
    # the first one landed but was not readable yet when the second looked: the second loses to it, and
    # still gets the scope
    real, looks = scope_reads.scope, []

    async def unseen_at_first(conn, workspace_id, scope_id):
        looks.append(scope_id)
        return None if len(looks) == 1 else await real(conn, workspace_id, scope_id)

    monkeypatch.setattr(scope_reads, "scope", unseen_at_first)
    raced = await create(scope_id="south", name="Bob down south", session_ids=["s2", "s3"])
    assert raced.scope.created_at == first.scope.created_at and raced.consistency_token
    monkeypatch.undo()
    # anything else under its id is still refused
    for other in (dict(name="Bob", session_ids=["s2", "s3"]), dict(name="Bob down south", session_ids=["s2"])):
        code, details = await _status(create(scope_id="south", **other))
        assert code == grpc.StatusCode.ALREADY_EXISTS and "with another name or other first sessions" in details
    listed = await scopes.ListScopes(scopes_pb2.ListScopesRequest(workspace_id="w"))
    assert [s.scope_id for s in listed.scopes] == ["empty", "north", "south"]


async def test_every_read_refuses_an_unknown_or_malformed_scope_id(world):
    reads = (
        _representation,
        _context,
        _search_observations,
        _search_workspace,
        _search_peer,
        lambda w, **kw: dialectic_pb2_grpc.DialecticServiceStub(w["chan"]).Chat(
            dialectic_pb2.ChatRequest(workspace_id="w", observer_id="alice", target_id="bob", query=WHERE, **kw)
        ),
    )
    for read in reads:
        code, details = await _status(read(world, scope_id="ghost"))
        assert code == grpc.StatusCode.NOT_FOUND and "scope 'ghost'" in details and "CreateScope" in details
        assert (await _status(read(world, scope_id="bad id")))[0] == grpc.StatusCode.INVALID_ARGUMENT


async def test_scopes_are_listed_in_pages_and_a_scope_is_refused_past_its_session_limit(world, monkeypatch):
    from services.api import scopes as scope_writes

    scopes = world["scopes"]
    monkeypatch.setattr(scope_writes, "MAX_SCOPE_SESSIONS", 2)  # 1,000 in service: replies stay far under 4 MiB
    add = scopes_pb2.AddScopeSessionsRequest(workspace_id="w", scope_id="north", session_ids=["s2", "s3"])
    code, details = await _status(scopes.AddScopeSessions(add))
    assert (
        code == grpc.StatusCode.INVALID_ARGUMENT and "holds 1 sessions; adding 2 would pass the limit of 2" in details
    )
    north = await scopes.GetScope(scopes_pb2.GetScopeRequest(workspace_id="w", scope_id="north"))
    assert list(north.session_ids) == ["s1"]  # nothing of the refused add was written

    listed, token = [], ""
    while True:
        page = await scopes.ListScopes(
            scopes_pb2.ListScopesRequest(workspace_id="w", page=common_pb2.PageRequest(page_size=1, page_token=token))
        )
        listed += [s.scope_id for s in page.scopes]
        token = page.next_page_token
        if not token:
            break
    assert listed == ["empty", "north"]
