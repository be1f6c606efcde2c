"""Issue 10 §3 through the real stack: each configuration level overrides the one below, in what the
processors do and in what GetEffectiveConfiguration reports, and a rebuild reproduces it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from peerlog.v1 import common_pb2, configuration_pb2_grpc, messages_pb2, peers_pb2, sessions_pb2
from peerlog.v1 import configuration_pb2 as cfg
from projections.rebuild import rebuild
from projections.schema import perceptions, summaries
from services.api import configurations as configuration_api
from services.cli.client import Client
from services.events import MessageConfigured
from tests.integration.test_chat import memory, serve  # noqa: F401 (fixtures)
from tests.integration.test_deriver import rows
from tests.support.extractor import is_deriver
from tests.support.model_server import Reply
from tests.support.wait import eventually

L = cfg.ConfigurationLevel


class Levels:
    """The ConfigurationService, as a user calls it."""

    def __init__(self, channel) -> None:
        self.stub = configuration_pb2_grpc.ConfigurationServiceStub(channel)

    async def workspace(self, w, **settings) -> str:
        return (
            await self.stub.SetWorkspaceConfiguration(
                cfg.SetWorkspaceConfigurationRequest(workspace_id=w, configuration=cfg.Configuration(**settings))
            )
        ).consistency_token

    async def session(self, w, s, **settings) -> str:
        return (
            await self.stub.SetSessionConfiguration(
                cfg.SetSessionConfigurationRequest(
                    workspace_id=w, session_id=s, configuration=cfg.Configuration(**settings)
                )
            )
        ).consistency_token

    async def message(self, w, s, m, **settings) -> str:
        return (
            await self.stub.SetMessageConfiguration(
                cfg.SetMessageConfigurationRequest(
                    workspace_id=w, session_id=s, message_id=m, configuration=cfg.Configuration(**settings)
                )
            )
        ).consistency_token

    async def effective(self, w, s="", m="", as_of=None, token="") -> dict[str, tuple]:
        request = cfg.GetEffectiveConfigurationRequest(workspace_id=w, session_id=s, message_id=m)
        request.consistency.consistency_token = token
        if as_of is not None:
            request.as_of.FromDatetime(as_of)
        out = await self.stub.GetEffectiveConfiguration(request)
        return {name: (getattr(out.values, name), out.levels[name]) for name in out.levels}


def said(peer, text, **settings):
    return messages_pb2.NewMessage(
        peer_id=peer, content=text, **({"configuration": cfg.Configuration(**settings)} if settings else {})
    )


async def test_each_level_overrides_the_one_below_in_what_get_effective_configuration_reports(channel):
    c, levels = Client(channel), Levels(channel)
    await c.setup_conversation("w", "s")
    before = datetime.now(UTC)
    await asyncio.sleep(0.01)
    everywhere = await levels.effective("w", "s")
    assert everywhere["reasoning"] == (True, L.CONFIGURATION_LEVEL_GLOBAL)
    assert everywhere["summary_short_every"] == (20, L.CONFIGURATION_LEVEL_GLOBAL)

    await levels.workspace("w", summary_short_every=7, reasoning=False, dialectic_instructions="answer in French")
    await levels.session("w", "s", summary_short_every=3)
    token = (
        await c.add(
            "w",
            "s",
            [said("alice", "hi", summary_short_every=2, deriver_instructions="food only"), said("bob", "hello")],
        )
    ).consistency_token
    ids = [m.message_id for m in await c.all_messages("w", "s", token=token)]

    session = await levels.effective("w", "s")
    assert session["summary_short_every"] == (3, L.CONFIGURATION_LEVEL_SESSION)
    assert session["reasoning"] == (False, L.CONFIGURATION_LEVEL_WORKSPACE)
    assert session["dialectic_instructions"] == ("answer in French", L.CONFIGURATION_LEVEL_WORKSPACE)
    assert (await levels.effective("w"))["summary_short_every"] == (7, L.CONFIGURATION_LEVEL_WORKSPACE)
    message = await levels.effective("w", m=ids[0])
    assert message["summary_short_every"] == (2, L.CONFIGURATION_LEVEL_MESSAGE)
    assert message["deriver_instructions"] == ("food only", L.CONFIGURATION_LEVEL_MESSAGE)
    assert message["reasoning"] == (False, L.CONFIGURATION_LEVEL_WORKSPACE)
    assert (await levels.effective("w", m=ids[1]))["summary_short_every"] == (3, L.CONFIGURATION_LEVEL_SESSION)
    # as_of: the settings as they were before any level was set
    assert (await levels.effective("w", "s", as_of=before))["summary_short_every"] == (20, L.CONFIGURATION_LEVEL_GLOBAL)

    # a later session change leaves what the earlier messages were processed under as it was
    await levels.session("w", "s", summary_short_every=5)
    assert (await levels.effective("w", m=ids[1]))["summary_short_every"] == (3, L.CONFIGURATION_LEVEL_SESSION)
    # false set at a level is a value, not "unset": it overrides a true below it
    await levels.workspace("w", observe_others=True, reasoning=False)
    await levels.session("w", "s", observe_others=False)
    assert (await levels.effective("w", "s"))["observe_others"] == (False, L.CONFIGURATION_LEVEL_SESSION)
    # each Set replaces its level: the workspace's other settings are gone, the global ones show through
    await levels.workspace("w", reasoning=True)
    assert (await levels.effective("w"))["dialectic_instructions"] == ("", L.CONFIGURATION_LEVEL_GLOBAL)


async def test_bad_values_and_unknown_entities_are_refused(channel):
    c, levels = Client(channel), Levels(channel)
    await c.setup_conversation("w", "s")
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await levels.session("w", "s", summary_short_every=0)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "summary_short_every" in bad.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await levels.session("w", "nope", reasoning=False)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as long_text:
        await c.add("w", "s", [said("alice", "x", deriver_instructions="x" * 2001)])
    assert long_text.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def summary_kinds(settings, session):
    return [
        (r["kind"], r["last_seq"], r["messages_covered"])
        for r in rows(settings, summaries, summaries.c.session_id == session)
    ]


async def test_the_summarizer_takes_its_cadence_and_on_off_from_the_levels(
    channel, settings, model_server, start_worker
):
    model_server.reply_with(lambda req: Reply(content="a short summary"))
    start_worker("summarizer", PEERLOG_SUMMARIZER_LONG_EVERY="1000")
    c, levels = Client(channel), Levels(channel)
    for s in ("by-workspace", "by-session", "by-message"):
        await c.setup_conversation("w", s)
    await levels.workspace("w", summary_short_every=3)
    await levels.session("w", "by-session", summary_short_every=2)  # a number: the metadata override lost it
    for s in ("by-workspace", "by-session"):
        await c.add("w", s, [("alice", "one"), ("bob", "two"), ("alice", "three")])
    # the first message is left out of summaries at its own level: the summary waits for a third one
    await c.add(
        "w", "by-message", [said("alice", "one", summaries=False), ("bob", "two"), ("alice", "three"), ("bob", "four")]
    )
    eventually(lambda: all(summary_kinds(settings, s) for s in ("by-workspace", "by-session", "by-message")), 60)
    await asyncio.sleep(1)  # nothing more comes
    assert summary_kinds(settings, "by-workspace") == [("short", 3, 3)]
    assert summary_kinds(settings, "by-session") == [("short", 2, 2)]
    assert summary_kinds(settings, "by-message") == [("short", 4, 3)]


def deriver_prompts(model_server):
    return [r["messages"][0]["content"] for r in model_server.chat_requests() if is_deriver(r)]


async def test_reasoning_and_deriver_instructions_follow_the_levels(channel, settings, model_server, start_worker):
    model_server.reply_with(lambda req: Reply(content={"facts": []}))
    start_worker("router,deriver")
    c, levels = Client(channel), Levels(channel)
    for s in ("off", "on"):
        await c.setup_conversation("w", s)
    await levels.workspace("w", reasoning=False, deriver_instructions="Only food preferences.")
    await levels.session("w", "on", reasoning=True)
    await c.add("w", "off", [("alice", "I like tea")])
    await c.add(
        "w",
        "on",
        [
            said("alice", "I like soup"),
            said("alice", "secret", reasoning=False),
            said("alice", "I like rice", deriver_instructions="Only grains."),
        ],
    )
    perceived = lambda: sorted(r["session_id"] for r in rows(settings, perceptions))  # noqa: E731
    eventually(lambda: len(perceived()) >= 2 and len(deriver_prompts(model_server)) >= 2, 60)
    await asyncio.sleep(1)
    assert perceived() == ["on", "on"]  # the workspace's off, the session's on, the message's off
    prompts = deriver_prompts(model_server)
    assert [p.rsplit("\n", 1)[-1] for p in prompts] == ["Only food preferences.", "Only grains."]


async def test_a_member_saying_observe_others_false_is_left_out_where_the_session_turns_it_on(
    channel, settings, start_worker
):
    # false could not be told from unset: a session's observe_others=true made every member observe the
    # others, and no member could be left out of it
    start_worker("router")
    c, levels = Client(channel), Levels(channel)
    await c.workspace("w")
    for p in ("alice", "bob", "carol"):
        await c.peer("w", p, observe_me=False)
    spec = sessions_pb2.MemberSpec
    got = await c.session("w", "s", members=[spec(peer_id="alice"), spec(peer_id="bob", observe_others=False), "carol"])
    shown = {m.peer_id: m.HasField("observe_others") and m.observe_others for m in got.session.memberships}
    assert shown == {"alice": False, "bob": False, "carol": False}
    assert [m.HasField("observe_others") for m in got.session.memberships] == [False, True, False]
    await levels.session("w", "s", observe_others=True)
    await c.add("w", "s", [("alice", "hello all")])
    observers = lambda: sorted(r["observer_id"] for r in rows(settings, perceptions))  # noqa: E731
    eventually(lambda: observers() == ["carol"], 60)
    await asyncio.sleep(1)
    assert observers() == ["carol"]  # bob said no; alice wrote it, and observes herself only if observe_me


async def test_a_rebuild_reproduces_the_levels(channel, settings):
    c, levels = Client(channel), Levels(channel)
    await c.setup_conversation("w", "s")
    await levels.workspace("w", summaries=False)
    await levels.session("w", "s", summaries=True, summary_long_every=9)
    token = (await c.add("w", "s", [said("alice", "x", peer_card=False), said("bob", "y")])).consistency_token
    ids = [m.message_id for m in await c.all_messages("w", "s", token=token)]
    await levels.session("w", "s", summary_long_every=4)
    views = [await levels.effective("w", "s"), await levels.effective("w")] + [
        await levels.effective("w", m=i) for i in ids
    ]
    report = await asyncio.get_running_loop().run_in_executor(None, lambda: rebuild(settings))
    assert report.switched and report.differences["configurations"] == 0
    assert set(report.differences.values()) == {0}, report.differences
    assert [await levels.effective("w", "s"), await levels.effective("w")] + [
        await levels.effective("w", m=i) for i in ids
    ] == views
    assert views[2]["peer_card"] == (False, L.CONFIGURATION_LEVEL_MESSAGE)
    assert views[3]["summary_long_every"] == (9, L.CONFIGURATION_LEVEL_SESSION)


async def test_chat_adds_the_dialectic_instructions_of_the_workspace_or_the_session(memory, model_server):
    from tests.integration.test_chat import ask

    model_server.reply_with(lambda req: Reply(content="Bob lives in Oslo"))
    levels = Levels(memory["chan"])
    await levels.workspace("w", dialectic_instructions="Answer in French.")
    await levels.session("w", "s", dialectic_instructions="Answer in German.")
    await ask(memory["chan"])
    await ask(memory["chan"], session_id="s")
    systems = [r["messages"][0]["content"] for r in model_server.chat_requests()]
    assert [s.rsplit("\n", 1)[-1] for s in systems] == ["Answer in French.", "Answer in German."]


async def test_a_workspace_and_a_session_take_their_level_at_creation(channel):
    from peerlog.v1 import sessions_pb2, workspaces_pb2

    c, levels = Client(channel), Levels(channel)
    await c.workspaces.GetOrCreateWorkspace(
        workspaces_pb2.GetOrCreateWorkspaceRequest(
            workspace_id="w", configuration=cfg.Configuration(dreams=False, dream_threshold=5)
        )
    )
    await c.sessions.GetOrCreateSession(
        sessions_pb2.GetOrCreateSessionRequest(
            workspace_id="w", session_id="s", configuration=cfg.Configuration(dream_threshold=9)
        )
    )
    again = await c.sessions.GetOrCreateSession(
        sessions_pb2.GetOrCreateSessionRequest(
            workspace_id="w", session_id="s", configuration=cfg.Configuration(dream_threshold=1)
        )
    )
    assert not again.created  # an existing session keeps its level: used only at creation
    out = await levels.effective("w", "s")
    assert out["dreams"] == (False, L.CONFIGURATION_LEVEL_WORKSPACE)
    assert out["dream_threshold"] == (9, L.CONFIGURATION_LEVEL_SESSION)


async def test_the_dream_scheduler_follows_the_dream_settings_of_the_levels(channel, settings, start_worker):
    from tests.integration.test_dream_scheduler import pair_dreams, scheduler_state

    start_worker(
        "router,dream-scheduler",
        PEERLOG_DREAM_THRESHOLD="3",
        PEERLOG_DREAM_IDLE_S="0.5",
        PEERLOG_DREAM_TICK_S="0.3",
        PEERLOG_DREAM_COOLDOWN_S="0",
    )
    c, levels = Client(channel), Levels(channel)
    for w in ("eager", "off"):
        await c.setup_conversation(w, "s")
    await levels.workspace("eager", dream_threshold=1)  # below the global 3
    await levels.workspace("off", dreams=False)
    await levels.session("off", "s", dream_threshold=1)  # the session lowers the threshold, dreams stay off
    for w in ("eager", "off"):
        await c.add(w, "s", [("bob", "hello")])
    # the observations come on another topic than the perceptions: wait until the scheduler holds each
    # pair's settings, or facts counted first are (rightly) judged by the settings it had then
    eventually(
        lambda: (
            scheduler_state(settings, "eager/bob/bob").get("threshold") == 1
            and scheduler_state(settings, "off/bob/bob").get("dreams") is False
        ),
        30,
    )
    await c.create_observations("eager", "bob", "bob", ["Bob keeps bees"])
    await c.create_observations("off", "bob", "bob", ["Bob keeps bees", "Bob lives in Oslo", "Bob is a nurse"])
    dreamt = eventually(lambda: pair_dreams(settings), 30)
    await asyncio.sleep(2)
    assert (
        [(d["workspace_id"], d["new_explicit"]) for d in pair_dreams(settings)]
        == [("eager", 1)]
        == [(d["workspace_id"], d["new_explicit"]) for d in dreamt]
    )


async def test_get_context_leaves_the_peer_card_out_where_the_levels_turn_it_off(channel):
    from tests.integration.test_get_context import ask as get_context
    from tests.integration.test_peer_cards import set_card

    c, levels = Client(channel), Levels(channel)
    await c.setup_conversation("w", "s")
    await c.session("w", "s2", members=["alice", "bob"])
    written = await set_card(c, ["IDENTITY: Bob, a nurse in Oslo"])
    await levels.workspace("w", peer_card=False)
    await levels.session("w", "s2", peer_card=True)
    card = {}
    for s in ("s", "s2"):
        out = await get_context(
            channel,
            workspace_id="w",
            session_id=s,
            observer_id="alice",
            target_id="bob",
            token_budget=1000,
            consistency=common_pb2.ReadConsistency(consistency_token=written.consistency_token),
        )
        card[s] = list(out.peer_card)
    assert card == {"s": [], "s2": ["IDENTITY: Bob, a nurse in Oslo"]}


async def test_a_dream_where_the_peer_card_is_off_is_offered_no_card_tool(
    channel, settings, model_server, start_worker
):
    from tests.integration.test_dream_scheduler import scheduler_state
    from tests.integration.test_dreamer import call, dream_once, seed, specialist

    c, levels = Client(channel), Levels(channel)
    await seed(c)
    await levels.session("w", "s", peer_card=False)
    await c.add("w", "s", [("bob", "hello")])  # the router stamps (bob, bob)'s perception with the setting
    model_server.reply_with(
        lambda r: (
            Reply(tool_calls=[call("set_peer_card", entries=["ATTRIBUTE: x"])])
            if specialist(r) == "deduction" and len(r["messages"]) == 2
            else Reply(content="Done.")
        )
    )
    start_worker("router,dream-scheduler,dreamer")
    # the forced dream comes on another topic than the perception: wait until the scheduler holds the
    # perception's setting, or a dream forced first is (rightly) requested under the setting it had then
    eventually(lambda: scheduler_state(settings).get("peer_card") is False, 30)
    dream = await dream_once(c, settings)
    deduction = [r for r in model_server.chat_requests() if specialist(r) == "deduction"]
    assert "set_peer_card" not in {t["function"]["name"] for t in deduction[0]["tools"]}
    assert "set_peer_card" not in deduction[0]["messages"][0]["content"] and dream.edits == 0
    card = await c.peers.GetPeerCard(
        peers_pb2.GetPeerCardRequest(workspace_id="w", observer_id="bob", observed_id="bob")
    )
    assert list(card.entries) == []  # a call of the tool anyway changes nothing


async def test_a_message_level_set_after_the_message_is_read_back_and_as_of_and_a_rebuild_see_each_in_turn(
    channel, settings
):
    c, levels = Client(channel), Levels(channel)
    await c.setup_conversation("w", "s")
    await levels.session("w", "s", observe_others=True)
    before_it = datetime.now(UTC)
    await asyncio.sleep(0.01)
    token = (await c.add("w", "s", [said("alice", "hi", deriver_instructions="food only")])).consistency_token
    [message] = [m.message_id for m in await c.all_messages("w", "s", token=token)]
    await asyncio.sleep(0.01)
    between = datetime.now(UTC)
    await asyncio.sleep(0.01)
    await levels.message("w", "s", message, observe_others=False, peer_card=False)

    now = await levels.effective("w", m=message)
    assert now["observe_others"] == (False, L.CONFIGURATION_LEVEL_MESSAGE)  # false over the session's true
    assert now["peer_card"] == (False, L.CONFIGURATION_LEVEL_MESSAGE)
    assert now["deriver_instructions"] == ("", L.CONFIGURATION_LEVEL_GLOBAL)  # the set replaced the level whole
    before = await levels.effective("w", m=message, as_of=between)
    assert before["deriver_instructions"] == ("food only", L.CONFIGURATION_LEVEL_MESSAGE)
    assert before["observe_others"] == (True, L.CONFIGURATION_LEVEL_SESSION)
    with pytest.raises(grpc.aio.AioRpcError) as not_yet:  # as of before it was sent, the message was no one's
        await levels.effective("w", m=message, as_of=before_it)
    assert not_yet.value.code() == grpc.StatusCode.NOT_FOUND and "as of" in not_yet.value.details()

    report = await asyncio.get_running_loop().run_in_executor(None, lambda: rebuild(settings))
    assert report.switched and set(report.differences.values()) == {0}, report.differences
    assert await levels.effective("w", m=message) == now
    assert await levels.effective("w", m=message, as_of=between) == before


def stamped_behind(seconds: float):
    """MessageConfigured as an API host whose clock runs `seconds` behind stamps it."""
    return lambda **fields: MessageConfigured(**fields, occurred_at=datetime.now(UTC) - timedelta(seconds=seconds))


async def test_a_message_level_set_later_from_a_host_whose_clock_runs_behind_is_the_one_reads_show(
    channel, settings, monkeypatch
):
    # stamped before the set it replaced, it read as overridden by it: now, as of any time, in a clone
    c, levels = Client(channel), Levels(channel)
    await c.setup_conversation("w", "s")
    token = (await c.add("w", "s", [said("alice", "hi")])).consistency_token
    [message] = [m.message_id for m in await c.all_messages("w", "s", token=token)]
    await asyncio.sleep(0.01)
    before_sets = datetime.now(UTC)
    await asyncio.sleep(0.01)
    await levels.message("w", "s", message, deriver_instructions="first")
    monkeypatch.setattr(configuration_api, "MessageConfigured", stamped_behind(4))
    token = await levels.message("w", "s", message, deriver_instructions="second")

    now = await levels.effective("w", m=message, token=token)
    then = await levels.effective("w", m=message, as_of=before_sets)
    assert now["deriver_instructions"] == ("second", L.CONFIGURATION_LEVEL_MESSAGE)
    assert then["deriver_instructions"] == ("", L.CONFIGURATION_LEVEL_GLOBAL)  # before either set
    cloned = await c.sessions.CloneSession(
        sessions_pb2.CloneSessionRequest(
            workspace_id="w",
            session_id="s",
            new_session_id="s2",
            consistency=common_pb2.ReadConsistency(consistency_token=token),
        )
    )
    [copy] = cloned.message_ids
    copied = await levels.effective("w", m=copy, token=cloned.consistency_token)
    assert copied["deriver_instructions"] == ("second", L.CONFIGURATION_LEVEL_MESSAGE)

    report = await asyncio.get_running_loop().run_in_executor(None, lambda: rebuild(settings))
    assert report.switched and set(report.differences.values()) == {0}, report.differences
    assert await levels.effective("w", m=message) == now
    assert await levels.effective("w", m=message, as_of=before_sets) == then


async def test_a_message_level_is_set_only_on_a_message_of_that_session(channel):
    c, levels = Client(channel), Levels(channel)
    await c.setup_conversation("w", "s")
    await c.session("w", "s2", members=["alice"])
    token = (await c.add("w", "s", [said("alice", "hi")])).consistency_token
    [message] = [m.message_id for m in await c.all_messages("w", "s", token=token)]
    for session, message_id in (("s2", message), ("s", "nope")):
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await levels.message("w", session, message_id, reasoning=False)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        assert f"message {message_id!r} does not exist in session {session!r}" in missing.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await levels.message("w", "s", message, dream_threshold=0)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "dream_threshold" in bad.value.details()
    assert (await levels.effective("w", m=message))["reasoning"] == (True, L.CONFIGURATION_LEVEL_GLOBAL)
    with pytest.raises(grpc.aio.AioRpcError) as elsewhere:  # reading it under another session is no answer
        await levels.effective("w", s="s2", m=message)
    assert elsewhere.value.code() == grpc.StatusCode.NOT_FOUND
    assert f"message {message!r} does not exist in session 's2'" in elsewhere.value.details()
