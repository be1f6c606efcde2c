"""peerlog_client.memory against the real stack (Kafka, Postgres, projector, API server) and the HTTP test
model behind Chat: cadences, depth passes, prewarm, levels, recall modes, presets, chunking, failing open."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from peerlog_client import MemberSpec, Peerlog
from peerlog_client.errors import Unavailable
from peerlog_client.memory import MemoryProvider, Sender
from peerlog_client.memory.config import validate
from peerlog_client.models import NewObservation
from services.events import (
    Level,
    ObservationAdded,
    ObservationSuperseded,
    ProducerInfo,
    SummaryKind,
    SummaryUpdated,
)
from tests.integration.test_api_tls import pki  # noqa: F401 - the fixture
from tests.integration.test_client_library import ApiInThread, admin_token, api  # noqa: F401 - api: the fixture
from tests.support.model_server import Reply
from tests.support.observations import append
from tests.support.wait import eventually

WEAK = "Not much yet."
STRONG = "\n".join(f"- Alice fact number {i}: she keeps bees, lives in Lisbon and likes long walks." for i in range(8))


@pytest.fixture
def make_provider(api, settings, tmp_path) -> Iterator:
    made: list[MemoryProvider] = []

    def make(session: str | None = None, client: Peerlog | None = None, **keys) -> MemoryProvider:
        config = validate(
            [
                (
                    "test",
                    {
                        "target": api.address,
                        "token": admin_token(settings),
                        "workspace": "acme",
                        "peerName": "alice",
                        "aiPeer": "bot",
                        "sessionStrategy": "global",
                        # a test of the timeout sets its own: under a loaded CI machine a first Chat took over 5 s,
                        # and the cadence test counted a turn without its dialectic
                        "timeout": 30,
                        "writeFrequency": "turn",
                        **keys,
                    },
                )
            ]
        )
        provider = MemoryProvider(config, directory=tmp_path, session=session, client=client)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


def seeded(memory: MemoryProvider) -> MemoryProvider:
    """A first exchange in the session: with nothing about the pair, Chat abstains without a model call."""
    memory.record_turn("I keep bees on my roof in Lisbon", "How many hives?")
    memory.flush()
    return memory


def chats(model_server) -> list[dict]:
    """The chat completion requests the dialectic made (embeddings are another route)."""
    return model_server.chat_requests()


def prompt_text(request: dict) -> str:
    return "\n".join(str(m.get("content")) for m in request["messages"])


@pytest.mark.parametrize(
    ("context_cadence", "dialectic_cadence", "base_turns", "dialectic_turns"),
    [
        (1, 2, [1, 2, 3, 4, 5, 6, 7], [1, 3, 5, 7]),
        (3, 1, [1, 4, 7], [1, 2, 3, 4, 5, 6, 7]),
        (2, 5, [1, 3, 5, 7], [1, 6]),
    ],
)
def test_cadences_count_turns_for_each_knob(
    make_provider, model_server, context_cadence, dialectic_cadence, base_turns, dialectic_turns
):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    memory = seeded(make_provider(contextCadence=context_cadence, dialecticCadence=dialectic_cadence))
    for i in range(7):
        memory.context_for_turn(f"message {i}")
        memory.record_turn(f"message {i}", f"answer {i}")
    assert memory.stats.base_refreshes == base_turns
    assert memory.stats.dialectic_runs == dialectic_turns
    assert len(chats(model_server)) == len(dialectic_turns)  # depth 1: one Chat, one model call, per run


def test_depth_three_runs_assessment_audit_and_reconciliation_at_rising_levels(make_provider, model_server):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    memory = seeded(make_provider(dialecticDepth=3, dialecticReasoningLevel="medium"))
    context = memory.context_for_turn("hi")
    assert memory.stats.dialectic_passes == ["minimal", "low", "medium"]
    prompts = [prompt_text(r) for r in chats(model_server)]
    assert len(prompts) == 3
    assert "Who is this person?" in prompts[0]  # cold: no base context yet
    assert "Audit it" in prompts[1] and WEAK in prompts[1]
    assert "contradictions" in prompts[2]
    assert WEAK in context


def test_given_depth_levels_replace_the_proportional_ones(make_provider, model_server):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    memory = seeded(make_provider(dialecticDepth=2, dialecticDepthLevels=["high", "minimal"]))
    memory.context_for_turn("hi")
    assert memory.stats.dialectic_passes == ["high", "minimal"]


def test_a_pass_with_strong_signal_ends_the_run_early(make_provider, model_server):
    model_server.reply_with(lambda request: Reply(content=STRONG))
    memory = seeded(make_provider(dialecticDepth=3, dialecticMaxChars=5000))
    context = memory.context_for_turn("hi")
    assert len(memory.stats.dialectic_passes) == 1 and len(chats(model_server)) == 1
    assert "Alice fact number 7" in context


def test_the_dialectic_never_quotes_one_user_what_another_told_the_ai(make_provider, model_server):
    memory = seeded(make_provider())
    assert memory.observer_of("alice") == "bot"  # the AI's knowledge of alice answers
    ws = memory.client.workspace("acme")
    carols = ws.session("carol-dm", members=[ws.peer("bot"), ws.peer("carol")])
    carols.add_messages([ws.peer("carol").message("my door code is 4471")])
    grep = {"id": "c1", "type": "function", "function": {"name": "grep_messages", "arguments": '{"pattern": "door"}'}}
    model_server.script([Reply(tool_calls=[grep])])
    model_server.reply_with(lambda request: Reply(content=WEAK))
    memory.context_for_turn("what is the door code?")
    results = [m["content"] for m in chats(model_server)[1]["messages"] if m["role"] == "tool"]
    assert results and not any("4471" in r for r in results)
    assert "4471" in "".join(m.content for m in carols.messages())  # it was said, to the AI, where alice was not


def test_the_warm_prompt_is_used_once_base_context_exists(make_provider, model_server):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    memory = seeded(make_provider())
    memory.context_for_turn("first")  # nothing about alice at all: cold
    memory.peer("bot").set_card(["ATTRIBUTE: keeps bees"], target="alice")  # now the base layer has her card
    memory.context_for_turn("second")
    memory.context_for_turn("third: what about my bees?")
    prompts = [prompt_text(r) for r in chats(model_server)]
    assert "Who is this person?" in prompts[0]
    assert "discussed in this session" in prompts[-1] and "what about my bees?" in prompts[-1]


def test_prewarm_is_handed_to_turn_1(make_provider, model_server):
    model_server.reply_with(lambda request: Reply(content="Prewarmed: Alice likes bees."))
    memory = seeded(make_provider(dialecticDepth=2))
    memory.start()
    assert memory.wait_prewarm(10)
    made = len(chats(model_server))
    assert made == 2  # the prewarm runs at full depth
    context = memory.context_for_turn("hello")
    assert "Prewarmed: Alice likes bees." in context
    assert memory.stats.prewarm_handed_over and len(chats(model_server)) == made
    assert memory.stats.dialectic_runs == [1]


def test_turn_1_makes_one_bounded_call_when_the_prewarm_is_late(make_provider, model_server):
    # generous: the fallback is a whole Chat (reads and a model call), which a busy machine slows
    model_server.script([Reply(content="too late", delay_s=10), Reply(content="Fallback: Alice likes tea.")])
    memory = seeded(make_provider(timeout=5))
    memory.start()
    deadline = time.monotonic() + 10
    while not chats(model_server) and time.monotonic() < deadline:
        time.sleep(0.02)  # the prewarm's Chat is waiting on its slow model reply
    started = time.monotonic()
    context = memory.context_for_turn("hello")
    assert time.monotonic() - started < 5 + 0.5
    assert memory.stats.sync_fallbacks == 1 and not memory.stats.prewarm_handed_over
    assert "Fallback: Alice likes tea." in context


def test_the_dialectic_level_rises_with_the_query_length_up_to_the_cap(make_provider, model_server):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    memory = seeded(make_provider(dialecticCadence=1, reasoningLevelCap="medium"))
    for query in ("short", "x" * 120, "y" * 400):
        memory.context_for_turn(query)
    assert memory.stats.dialectic_passes == ["low", "medium", "medium"]
    pinned = seeded(make_provider(dialecticCadence=1, reasoningHeuristic=False))
    pinned.context_for_turn("z" * 500)
    assert pinned.stats.dialectic_passes == ["low"]


@pytest.mark.parametrize(("mode", "injects", "tools"), [("hybrid", True, 5), ("context", True, 0), ("tools", False, 5)])
def test_each_recall_mode_injects_and_offers_tools_as_its_table_says(make_provider, model_server, mode, injects, tools):
    model_server.reply_with(lambda request: Reply(content="Alice keeps bees."))
    memory = seeded(make_provider(recallMode=mode))
    memory.start()
    memory.wait_prewarm(10)
    context = memory.context_for_turn("what do you know?")
    assert ("Alice keeps bees." in context) is injects
    assert (len(chats(model_server)) > 0) is injects  # tools mode calls nothing on its own
    assert len(memory.tools("openai")) == len(memory.tools("anthropic")) == tools
    answer = memory.dispatch("peerlog_reasoning", {"query": "What does Alice keep?"})
    if tools:
        assert '"answer": "Alice keeps bees."' in answer
    else:
        assert answer.startswith("error:") and "context mode" in answer


def test_tools_mode_with_init_on_session_start_creates_the_session_at_start(make_provider):
    memory = make_provider(recallMode="tools", initOnSessionStart=True)
    memory.start()
    assert [s.session_id for s in memory.workspace().sessions()] == ["global"]
    lazy = make_provider(recallMode="tools", sessionStrategy="per-session")
    lazy.start()
    assert lazy.session_id not in [s.session_id for s in lazy.workspace().sessions()]


def members(memory: MemoryProvider) -> dict[str, tuple[bool | None, bool]]:
    session = memory.workspace().session("global", create=False)
    return {m.peer_id: (m.observe_me, m.observe_others) for m in session.info.memberships if m.left_at is None}


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({"observationMode": "directional"}, {"alice": (True, True), "bot": (True, True)}),
        ({"observationMode": "unified"}, {"alice": (True, False), "bot": (False, True)}),
        (
            {
                "observation": {
                    "user": {"observeMe": True, "observeOthers": False},
                    "ai": {"observeMe": True, "observeOthers": False},
                }
            },
            {"alice": (True, False), "bot": (True, False)},
        ),
    ],
)
def test_observation_presets_become_the_session_member_settings(make_provider, keys, expected):
    memory = make_provider(**keys)
    memory.record_turn("hi", "hello")
    assert members(memory) == expected
    assert {p: (f.observe_me, f.observe_others) for p, f in memory.flags.items()} == expected


def test_server_side_member_settings_win_and_are_read_back(make_provider):
    memory = make_provider(observationMode="directional")
    ws = memory.client.workspace("acme")
    ws.peer("alice"), ws.peer("bot")
    ws.session("global", members=[MemberSpec("alice", observe_me=False), MemberSpec("bot", observe_others=False)])
    memory.record_turn("hi", "hello")
    assert members(memory) == {"alice": (False, None), "bot": (None, False)}  # alice did not say: None
    assert memory.observer_of("alice") == "alice"  # the bot does not observe others: read alice's self-model


def test_chunking_keeps_order_and_loses_nothing(make_provider):
    memory = make_provider(messageMaxChars=1000)
    long = " ".join(f"word{i:04d}" for i in range(400))  # 3,599 characters
    memory.record_turn("before", "ok")
    memory.record_turn(long, "a" * 2500)
    memory.record_turn("after", "done")
    got = list(memory.workspace().session("global", create=False).messages())
    alice = [m for m in got if m.peer_id == "alice"]
    assert [m.content for m in alice][0] == "before" and alice[-1].content == "after"
    pieces = alice[1:-1]
    assert len(pieces) == 4 and all(len(m.content) <= 1000 for m in pieces)
    assert "".join(m.content for m in pieces) == long
    assert [m.metadata["chunk"] for m in pieces] == [0, 1, 2, 3]
    assert "".join(m.content for m in got if m.peer_id == "bot" and m.content.startswith("a")) == "a" * 2500
    assert [m.peer_id for m in got] == ["alice", "bot", *["alice"] * 4, *["bot"] * 3, "alice", "bot"]


@pytest.mark.parametrize("frequency", ["async", "session", 2])
def test_each_write_frequency_writes_every_turn_in_order_by_close(make_provider, frequency):
    memory = make_provider(writeFrequency=frequency)
    for i in range(3):
        memory.record_turn(f"q{i}", f"a{i}")
    if frequency == 2:  # every 2 turns: the first two are written, the third waits
        assert [m.content for m in memory.workspace().session("global", create=False).messages()] == [
            "q0",
            "a0",
            "q1",
            "a1",
        ]
    memory.close()
    with Peerlog(memory.config.resolved_target, token=memory.config.resolved_token) as client:
        client.remember_write(memory.client.consistency_token)  # the writes of the closed provider's client
        got = [m.content for m in client.workspace("acme").session("global", create=False).messages()]
    assert got == ["q0", "a0", "q1", "a1", "q2", "a2"]


def test_turns_written_late_keep_the_time_they_were_recorded(make_provider):
    memory = make_provider(writeFrequency="session")  # every turn waits for close()
    before = datetime.now(UTC)
    memory.record_turn("I keep bees", "How many hives?")
    after = datetime.now(UTC)
    time.sleep(1.5)
    memory.close()
    with Peerlog(memory.config.resolved_target, token=memory.config.resolved_token) as client:
        client.remember_write(memory.client.consistency_token)
        got = list(client.workspace("acme").session("global", create=False).messages())
    assert [m.content for m in got] == ["I keep bees", "How many hives?"]
    for message in got:  # stamped when the turn was recorded, not 1.5 s later when close() sent it
        assert before - timedelta(seconds=1) <= message.created_at <= after + timedelta(seconds=1)


def test_save_messages_false_writes_nothing(make_provider):
    memory = make_provider(saveMessages=False)
    memory.record_turn("secret", "ok")
    memory.close()
    assert memory.writer.pending == 0
    with Peerlog(memory.config.resolved_target, token=memory.config.resolved_token) as client:
        assert [s.session_id for s in client.workspace("acme").sessions()] == []


def test_a_bot_turn_goes_to_its_own_session_and_conclude_and_profile_refuse_writes(make_provider, model_server):
    memory = make_provider(recallMode="tools")
    memory.record_turn("hello human-bot", "hi")
    memory.context_for_turn("ping from another bot", sender=Sender("helper", is_bot=True))
    assert memory.bot_turn
    refused = memory.dispatch("peerlog_conclude", {"conclusion": "The bot likes pings"})
    assert refused.startswith("error:") and "another bot" in refused
    assert "another bot" in memory.dispatch("peerlog_profile", {"card": ["ATTRIBUTE: x"]})
    assert memory.dispatch("peerlog_profile", {}).startswith("{")  # reading is fine
    memory.record_turn("ping from another bot", "pong")
    assert not memory.bot_turn
    ws = memory.workspace()
    assert [m.content for m in ws.session("a2a-bot-helper", create=False).messages()] == [
        "ping from another bot",
        "pong",
    ]
    assert [m.content for m in ws.session("global", create=False).messages()] == ["hello human-bot", "hi"]
    skipping = make_provider(a2aSessions=False, workspace="other")
    skipping.record_turn("ping", "pong", sender=Sender("helper", is_bot=True))
    assert list(skipping.workspace().sessions()) == []


def test_a_bot_turns_context_reads_its_own_session_and_never_joins_the_humans(make_provider, model_server):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    memory = make_provider(recallMode="hybrid")
    memory.record_turn("my bank PIN is 4321", "noted")
    memory.context_for_turn("ping from another bot", sender=Sender("helper", is_bot=True))
    assert memory.stats.base_refreshes == [1]  # the base layer was read: from the bot's own session
    memory.record_turn("ping from another bot", "pong")
    assert set(members(memory)) == {"alice", "bot"}
    a2a = memory.workspace().session("a2a-bot-helper", create=False)
    assert {m.peer_id for m in a2a.info.memberships if m.left_at is None} == {"bot-helper", "bot"}


def test_the_search_and_context_tools_show_only_messages_the_current_user_saw(make_provider):
    ada = make_provider(session="dm-ada", recallMode="tools", rerankSearch=False)
    ada.record_turn("my bank PIN is 4321", "noted", sender=Sender("ada"))
    bob = make_provider(client=ada.client, session="dm-bob", recallMode="tools", rerankSearch=False)
    bob.record_turn("I like bank holidays", "me too", sender=Sender("bob"))
    for memory, user, own, other in ((ada, "ada", "4321", "holidays"), (bob, "bob", "holidays", "4321")):
        memory.context_for_turn("hi", sender=Sender(user))  # the AI saw both chats; each user only their own
        found = json.loads(memory.dispatch("peerlog_search", {"query": "bank PIN holidays"}))
        relevant = json.loads(memory.dispatch("peerlog_context", {"search_query": "bank PIN holidays"}))
        for shown in (found, relevant["relevant_messages"]):
            assert any(own in m["content"] for m in shown)
            assert not any(other in m["content"] for m in shown)


def current_members(memory: MemoryProvider, session_id: str) -> set[str]:
    session = memory.workspace().session(session_id, create=False)
    return {m.peer_id for m in session.info.memberships if m.left_at is None}


def test_a_gateway_chats_start_and_an_assistant_only_turn_never_make_the_default_peer_a_member(
    make_provider, model_server
):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    xavier = Sender("1001", name="Xavier")
    chat = make_provider(session="telegram:42")  # hybrid: start() readies the chat, and used to prewarm as alice
    chat.start()
    chat.wait_prewarm(10)
    for text, answer in (("hi", "hello"), ("", "nice photo!")):  # the second turn is a photo: no text
        chat.context_for_turn(text, sender=xavier)
        chat.record_turn(text, answer, sender=xavier)
    assert current_members(chat, chat.session_id) == {"1001", "bot"}  # alice never observes Xavier
    said = [(m.peer_id, m.content) for m in chat.workspace().session(chat.session_id, create=False).messages()]
    assert said == [("1001", "hi"), ("bot", "hello"), ("bot", "nice photo!")]

    # a chat readied at start in tools mode, whose first turn is a photo: the AI alone, until a user speaks
    photo_first = make_provider(client=chat.client, session="telegram:43", recallMode="tools", initOnSessionStart=True)
    photo_first.start()
    photo_first.record_turn("", "what a sunset!", sender=xavier)
    assert current_members(photo_first, photo_first.session_id) == {"bot"}
    photo_first.record_turn("thanks", "any time", sender=xavier)
    assert current_members(photo_first, photo_first.session_id) == {"1001", "bot"}


def earlier_session(memory: MemoryProvider, name: str, members, turns) -> None:
    """A session as an earlier provider named a chat's: by its cleaned key alone."""
    workspace = memory.client.workspace("acme")
    for peer in members:
        workspace.peer(peer)
    workspace.session(name, members=[MemberSpec(p) for p in members]).add_messages(turns)


def test_two_chat_keys_that_clean_alike_never_share_a_session_even_one_an_earlier_version_merged(make_provider):
    ada = make_provider(session="tg:1/2", recallMode="tools", rerankSearch=False)
    ada.record_turn("my door code is 4471", "noted", sender=Sender("ada"))
    bob = make_provider(client=ada.client, session="tg:1.2", recallMode="tools", rerankSearch=False)
    bob.record_turn("what is the door code?", "I cannot say", sender=Sender("bob"))
    assert ada.current_session().id != bob.current_session().id
    bob.context_for_turn("hi", sender=Sender("bob"))
    assert "4471" not in bob.dispatch("peerlog_context", {"search_query": "door code"})

    # an earlier version put both chats in "tg-5-6": it is neither's now
    earlier_session(ada, "tg-5-6", ["ada", "bob", "bot"], [("ada", "my bike lock is 9921")])
    merged = [
        make_provider(client=ada.client, session=key, recallMode="tools", rerankSearch=False)
        for key in ("tg:5/6", "tg:5.6")
    ]
    for memory, user in zip(merged, ("ada", "bob"), strict=True):
        memory.context_for_turn("hi", sender=Sender(user))
    assert len({m.current_session().id for m in merged} | {"tg-5-6"}) == 3


def test_a_chat_keeps_the_session_an_earlier_version_named_by_its_cleaned_key_past_a_prewarm_and_a_failed_look(
    make_provider, model_server, monkeypatch
):
    model_server.reply_with(lambda request: Reply(content="Not much yet."))
    setup = make_provider(recallMode="tools")
    earlier_session(setup, "tg-3-4", ["ada", "bot"], [("ada", "my locker is number 12")])
    memory = make_provider(client=setup.client, session="tg:3/4")  # hybrid: the start reads as no user
    memory.start()
    memory.wait_prewarm(10)
    memory.context_for_turn("hi", sender=Sender("ada"))
    assert memory.current_session().id == "tg-3-4"
    carol = make_provider(client=setup.client, session="tg:3.4", recallMode="tools")
    carol.context_for_turn("hi", sender=Sender("carol"))
    assert carol.current_session().id not in ("tg-3-4", memory.session_id)  # not carol's chat

    earlier_session(setup, "tg-7-8", ["ada", "bot"], [("ada", "my bike is blue")])
    flaky = make_provider(client=setup.client, session="tg:7/8", recallMode="tools")
    workspace_type, looks = type(flaky.workspace()), []
    session = workspace_type.session

    def restarting_once(self, session_id, *args, **kw):
        looks.append(session_id)
        if len(looks) == 1:
            raise Unavailable("the server is restarting")
        return session(self, session_id, *args, **kw)

    monkeypatch.setattr(workspace_type, "session", restarting_once)
    flaky.context_for_turn("hi", sender=Sender("ada"))
    with pytest.raises(Unavailable):
        flaky.current_session()  # a tool's call while the server restarts: the first look fails
    assert flaky.current_session().id == "tg-7-8"  # looked at again, not given up


def test_a_member_removed_elsewhere_is_added_back_and_later_turns_are_written(make_provider):
    memory = make_provider()
    memory.record_turn("first", "one")
    with Peerlog(memory.config.resolved_target, token=memory.config.resolved_token, timeout=10) as client:
        client.workspace("acme").session("global", create=False).remove_members("alice")
    for text in ("second", "third"):
        memory.record_turn(text, "ok")
    assert memory.writer.pending == 0 and not memory.stats.failures
    got = [m.content for m in memory.workspace().session("global", create=False).messages()]
    assert got == ["first", "one", "second", "ok", "third", "ok"]
    assert set(members(memory)) == {"alice", "bot"}


def test_unstorable_text_in_one_turn_is_made_storable_and_never_costs_another_turn(make_provider):
    memory = make_provider(writeFrequency="session")
    memory.record_turn("turn one", "answer one")
    memory.record_turn("binary paste \x00 here", "cut mid-emoji \ud83d")
    memory.record_turn("turn three", "answer three")
    memory.close()
    assert memory.writer.pending == 0
    with Peerlog(memory.config.resolved_target, token=memory.config.resolved_token) as client:
        client.remember_write(memory.client.consistency_token)
        got = [m.content for m in client.workspace("acme").session("global", create=False).messages()]
    assert got == ["turn one", "answer one", "binary paste  here", "cut mid-emoji \ufffd", "turn three", "answer three"]


def test_gateway_users_are_written_under_their_resolved_peers(make_provider):
    memory = make_provider(userPeerAliases={"7654321": "alice"}, runtimePeerPrefix="tg_")
    memory.record_turn("from the owner", "ok", sender=Sender("7654321"))
    memory.record_turn("from a stranger", "ok", sender=Sender("42"))
    got = [(m.peer_id, m.content) for m in memory.workspace().session("global", create=False).messages()]
    assert got == [("alice", "from the owner"), ("bot", "ok"), ("tg_42", "from a stranger"), ("bot", "ok")]


def test_turns_are_written_under_the_senders_and_the_ais_display_names(make_provider):
    memory = make_provider(aiDisplayName="Lumen", runtimePeerPrefix="tg_")
    memory.record_turn("I keep bees", "Lovely!", sender=Sender("7654321", name="Ada King"))
    memory.record_turn("no letter in my name", "ok", sender=Sender("42", name="!!!"))  # refused: sent unnamed
    session = memory.workspace().session("global", create=False)
    shown = [(m.peer_id, m.author_name, m.content) for m in session.context(tokens=500).messages]
    assert shown == [
        ("tg_7654321", "Ada King", "I keep bees"),
        ("bot", "Lumen", "Lovely!"),
        ("tg_42", "", "no letter in my name"),
        ("bot", "Lumen", "ok"),
    ]
    assert memory.stats.failures["name"] == 1
    memory.context_for_turn("my bees?", sender=Sender("7654321", name="Ada King"))  # a search in Ada's turn
    found = json.loads(memory.dispatch("peerlog_search", {"query": "bees"}))  # the tools show the name too
    assert {"peer": "tg_7654321", "name": "Ada King", "content": "I keep bees"}.items() <= found[0].items()


def test_the_five_tools_round_trip_against_the_server(make_provider, model_server):
    model_server.reply_with(lambda request: Reply(content="Alice keeps bees."))
    memory = seeded(make_provider(recallMode="tools"))
    created = memory.dispatch("peerlog_conclude", {"conclusion": "Alice keeps bees"})
    observation_id = json.loads(created)["created"][0]
    assert "Alice keeps bees" in memory.dispatch("peerlog_context", {"search_query": "bees"})
    assert "roof in Lisbon" in memory.dispatch("peerlog_search", {"query": "bees roof"})
    assert "ATTRIBUTE: keeps bees" in memory.dispatch("peerlog_profile", {"card": ["ATTRIBUTE: keeps bees"]})
    assert "ATTRIBUTE: keeps bees" in memory.dispatch("peerlog_profile", {})
    assert "Alice keeps bees." in memory.dispatch(
        "peerlog_reasoning", {"query": "hobbies?", "reasoning_level": "minimal"}
    )
    assert memory.dispatch("peerlog_conclude", {"delete_id": observation_id}) == f'{{"deleted": "{observation_id}"}}'
    assert memory.workspace().observation(observation_id).deleted_at is not None
    # deletes only by id: no content, no query, and never another pair's observation
    assert "exactly one" in memory.dispatch("peerlog_conclude", {})
    assert "invalid arguments" in memory.dispatch("peerlog_conclude", {"delete_id": "bees*"})
    other = memory.peer("bot").create_observations(["the bot is a bot"]).observation_ids[0]
    assert "nothing deleted" in memory.dispatch("peerlog_conclude", {"delete_id": other})
    assert memory.workspace().observation(other).deleted_at is None


def test_a_conclusion_whose_reply_was_lost_is_stored_once_when_the_model_retries_it(make_provider):
    from peerlog_client.errors import DeadlineExceeded

    memory = make_provider(recallMode="tools")
    memory.current_session()
    peer = memory.peer("bot")  # the observer of alice (the AI observes others by default)
    real, lost = peer.create_observations, []

    def reply_lost(items, **keys):
        created = real(items, **keys)
        if not lost:
            lost.append(created)
            raise DeadlineExceeded("Deadline Exceeded")  # the write landed, its reply did not
        return created

    peer.create_observations = reply_lost
    first = memory.dispatch("peerlog_conclude", {"conclusion": "Alice is allergic to penicillin"})
    assert first.startswith("error:") and "may have been saved" in first
    second = json.loads(memory.dispatch("peerlog_conclude", {"conclusion": " Alice is allergic  to penicillin"}))
    assert second["created"] == list(lost[0].observation_ids)  # the same write, answered again

    def stored() -> list[str]:
        return [o.content for o in memory.peer("bot").observations(target="alice")]

    assert stored() == ["Alice is allergic to penicillin"]
    # deleted (the person asked), then stated again: a new conclusion, not the deleted one's reply
    memory.dispatch("peerlog_conclude", {"delete_id": second["created"][0]})
    again = json.loads(memory.dispatch("peerlog_conclude", {"conclusion": "Alice is allergic to penicillin"}))
    assert again["created"] != second["created"] and stored() == ["Alice is allergic to penicillin"]
    assert memory.workspace().observation(again["created"][0]).deleted_at is None


def test_a_conclusion_stated_again_after_its_first_copy_was_superseded_is_stored_anew(make_provider, settings):
    memory = make_provider(recallMode="tools")
    first = json.loads(memory.dispatch("peerlog_conclude", {"conclusion": "Alice is vegetarian"}))["created"][0]
    # a dream replaces it, as the dreamer replaces a client's explicit observation
    dreamer = ProducerInfo(component="dreamer", version="0", model="test-model", prompt_version="deduction-v1")
    pair = {"workspace_id": "acme", "observer_id": "bot", "observed_id": "alice", "producer": dreamer}
    replacement = ObservationAdded(
        **pair,
        observation_id="merged",
        level=Level.DEDUCTIVE,
        content="Alice eats no meat",
        premise_ids=(first,),
        dream_id="dream-1",
    )
    retired = ObservationSuperseded(
        **pair, observation_id=first, superseded_by="merged", reason="merged", causation_id="dream-1"
    )
    memory.client.remember_write(append(settings, [replacement, retired]))
    assert memory.workspace().observation(first).superseded_at is not None

    # stated again (the person said it again): stored anew, not answered with the superseded copy's reply
    again = json.loads(memory.dispatch("peerlog_conclude", {"conclusion": "Alice is vegetarian"}))["created"]
    assert again != [first] and memory.workspace().observation(again[0]).superseded_at is None
    current = [o.content for o in memory.peer("bot").observations(target="alice")]
    assert sorted(current) == ["Alice eats no meat", "Alice is vegetarian"]
    # and the model's retry of that one is still one write
    assert json.loads(memory.dispatch("peerlog_conclude", {"conclusion": "Alice is  vegetarian"}))["created"] == again


def test_with_dialectic_dynamic_the_models_level_reaches_chat_and_without_it_the_level_is_refused(
    make_provider, model_server
):
    model_server.reply_with(lambda request: Reply(content="Alice keeps bees."))
    memory = seeded(make_provider(recallMode="tools", timeout=30))
    for level in ("minimal", "high"):
        answer = json.loads(
            memory.dispatch("peerlog_reasoning", {"query": "What does Alice keep?", "reasoning_level": level})
        )
        assert answer == {"answer": "Alice keeps bees.", "level": level}
    offered = [{t["function"]["name"] for t in r.get("tools") or []} for r in chats(model_server)]
    assert len(offered) == 2 and offered[0] < offered[1]  # the server ran each level: minimal may only search
    fixed = make_provider(recallMode="tools", dialecticDynamic=False, dialecticReasoningLevel="high", timeout=30)
    refused = fixed.dispatch("peerlog_reasoning", {"query": "What does Alice keep?", "reasoning_level": "minimal"})
    assert refused.startswith("error: invalid arguments") and "reasoning_level" in refused
    assert len(chats(model_server)) == 2  # nothing was asked
    assert json.loads(fixed.dispatch("peerlog_reasoning", {"query": "What does Alice keep?"}))["level"] == "high"
    assert {t["function"]["name"] for t in chats(model_server)[-1].get("tools") or []} == offered[1]


def test_a_stopped_server_costs_a_turn_at_most_timeout_and_later_writes_arrive(
    make_provider, api, model_server, caplog
):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    memory = seeded(make_provider(timeout=1.0, dialecticCadence=1, writeFrequency="turn"))
    deadline = time.monotonic() + 30
    while WEAK not in memory.context_for_turn("before") and time.monotonic() < deadline:
        pass  # a first Chat on a busy machine may take longer than the 1 s timeout: until the layers hold it
    memory.record_turn("before", "ok")
    deadline = time.monotonic() + 30
    while not memory.flush() and time.monotonic() < deadline:
        time.sleep(0.2)  # a keyed write answers once it is readable: on a busy machine, past the 1 s timeout
    before = {kind: memory.stats.failures[kind] + memory.stats.timeouts[kind] for kind in ("context", "write")}
    api.stop()
    for text in ("while down 1", "while down 2"):
        started = time.monotonic()
        context = memory.context_for_turn(text)
        memory.record_turn(text, "ok")
        assert time.monotonic() - started <= 1.0 + 0.5  # context and write together, within timeout
        assert WEAK in context  # the cached layers are still served
    # failed (refused connections, retried until the client gives up) or timed out: either way counted and logged
    assert memory.stats.failures["context"] + memory.stats.timeouts["context"] - before["context"] == 2
    # every turn's write failed and was counted (a retried write of what was queued counts again)
    assert memory.stats.failures["write"] + memory.stats.timeouts["write"] - before["write"] >= 2
    assert memory.writer.pending == 4
    assert sum("going on without it" in r.message for r in caplog.records) >= 4
    api.start()
    memory.record_turn("after", "back")
    deadline = time.monotonic() + 15
    while not memory.flush() and time.monotonic() < deadline:
        time.sleep(0.2)  # the channel reconnects with backoff; writes fail fast until then
    got = [m.content for m in memory.workspace().session("global", create=False).messages()][2:]
    assert got == ["before", "ok", "while down 1", "ok", "while down 2", "ok", "after", "back"]


def test_the_base_layer_holds_the_summary_both_representations_and_both_cards(
    make_provider, model_server, start_worker
):
    summary = "Alice keeps bees in Lisbon."  # within the summarizer's word limit for two short turns
    model_server.reply_with(
        lambda request: Reply(content=summary if "rolling" in request["messages"][0]["content"] else WEAK)
    )
    start_worker("summarizer", PEERLOG_SUMMARIZER_SHORT_EVERY="2")
    memory = seeded(make_provider(recallMode="tools", timeout=30))  # tools: the layer is read below, not injected
    bot = memory.peer("bot")
    bot.create_observations(["Alice keeps three hives"], target="alice")
    # its self-representation, from this session: the base layer reads the AI's self-model from it alone
    bot.create_observations([NewObservation("The bot answers in short sentences", session_id="global")])
    bot.set_card(["ATTRIBUTE: keeps bees"], target="alice")
    bot.set_card(["IDENTITY: a travel assistant"])
    session = memory.workspace().session("global", create=False)
    eventually(lambda: session.summaries().short_summary, 60)
    layer = memory._base_layer("alice")
    for part in (
        summary,
        "Alice keeps three hives",
        "ATTRIBUTE: keeps bees",
        "The bot answers in short sentences",
        "IDENTITY: a travel assistant",
    ):
        assert part in layer
    assert layer.index(summary) < layer.index("Alice keeps three hives") < layer.index("IDENTITY: a travel")


def test_the_base_layer_never_carries_what_the_ai_said_in_another_users_chat(make_provider, model_server):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    # two agents of one AI, each serving its one user (a gateway's chat reads no self-model at all)
    ada = make_provider(peerName="ada", sessionStrategy="per-session", recallMode="context")
    ada.record_turn("book my oncology check", "I've booked your oncology follow-up for Tuesday, Ada")
    bob = make_provider(client=ada.client, peerName="bob", sessionStrategy="per-session", recallMode="context")
    bob.record_turn("any bank holiday soon?", "Monday is one, Bob")
    ai = ada.peer("bot")
    # the AI observes itself in every chat (directional): what it makes of each reply, in that reply's session
    ai.create_observations([NewObservation("I booked Ada's oncology follow-up for Tuesday", session_id=ada.session_id)])
    ai.create_observations([NewObservation("I told Bob that Monday is a bank holiday", session_id=bob.session_id)])
    bobs = bob.context_for_turn("hi")
    assert "Monday is a bank holiday" in bobs  # what the AI said in this chat still reaches it
    assert "oncology" not in bobs.lower()
    adas = ada.context_for_turn("hi")
    assert "oncology follow-up for Tuesday" in adas and "bank holiday" not in adas
    # in a gateway's chat, neither the AI's card (a dream over all its chats may write it) nor its self-model
    ai.set_card(["ATTRIBUTE: books oncology follow-ups for Ada"])
    dm = make_provider(client=ada.client, session="dm-bob", recallMode="context")
    dm.record_turn("any bank holiday soon?", "Monday is one, Bob", sender=Sender("bob"))
    ai.create_observations([NewObservation("I told Bob that Monday is a bank holiday", session_id=dm.session_id)])
    assert "oncology" not in dm.context_for_turn("hi", sender=Sender("bob")).lower()


def group_chat_summary(memory: MemoryProvider, content: str) -> SummaryUpdated:
    """A short summary of the chat's messages so far, as the summarizer writes it."""
    said = list(memory.workspace().session(memory.session_id, create=False).messages())
    return SummaryUpdated(
        workspace_id="acme",
        session_id=memory.session_id,
        kind=SummaryKind.SHORT,
        content=content,
        last_message_id=said[-1].message_id,
        last_seq=said[-1].seq,
        messages_covered=len(said),
        token_count=len(content.split()),
        model="m",
        prompt_version="v",
        producer=ProducerInfo(component="summarizer", version="0"),
    )


def test_a_late_member_of_a_group_chat_is_not_told_the_summary_of_turns_before_they_joined(
    make_provider, model_server, settings
):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    chat = make_provider(session="group-7", recallMode="context")
    ada, bob = Sender("ada"), Sender("bob")
    chat.context_for_turn("my bank PIN is 4321", sender=ada)
    chat.record_turn("my bank PIN is 4321", "noted, Ada", sender=ada)
    summary = group_chat_summary(chat, "Ada told the AI her bank PIN, 4321.")
    chat.client.remember_write(append(settings, [summary]))  # the summarizer's model is not what this is about
    # what the AI made of its reply, in this session
    chat.peer("bot").create_observations([NewObservation("I noted Ada's bank PIN", session_id=chat.session_id)])
    assert "her bank PIN, 4321" in chat.context_for_turn("what did I tell you?", sender=ada)  # she saw it all
    bobs = chat.context_for_turn("hello all", sender=bob)  # Bob speaks first after the summary was written
    assert "4321" not in bobs and "PIN" not in bobs


def test_the_profile_tool_never_shows_a_gateway_user_the_ais_card_written_from_every_chat(make_provider, model_server):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    memory = make_provider(session="dm-bob", recallMode="tools")
    memory.peer("bot").set_card(["ATTRIBUTE: books oncology follow-ups for Ada"])  # a dream over all its chats
    memory.context_for_turn("who are you?", sender=Sender("bob"))
    shown = memory.dispatch("peerlog_profile", {"peer": "ai"})
    assert shown.startswith("error:") and "oncology" not in shown
    refused = memory.dispatch("peerlog_profile", {"peer": "ai", "card": ["IDENTITY: Bob's own bot"]})
    assert refused.startswith("error:")
    assert memory.peer("bot").card().entries == ("ATTRIBUTE: books oncology follow-ups for Ada",)
    assert json.loads(memory.dispatch("peerlog_profile", {}))["peer"] == memory.current_user()  # Bob's card is his


def test_another_bots_turn_is_never_told_the_ais_card_and_the_one_user_still_is(make_provider, model_server):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    memory = seeded(make_provider(recallMode="context"))
    memory.peer("bot").set_card(["ATTRIBUTE: looks after alice's bees"])  # a dream may write it from alice's chats
    assert "alice's bees" in memory.context_for_turn("hi")
    memory.record_turn("hi", "hello")
    assert "alice's bees" not in memory.context_for_turn("ping", sender=Sender("helper", is_bot=True))


def test_a_tool_call_without_a_known_sender_in_a_chat_of_many_never_acts_as_the_default_peer(make_provider):
    chat = make_provider(session="group-8", recallMode="tools", rerankSearch=False)
    ada = Sender("ada")

    def from_a_thread_of_its_own(name: str, args: dict) -> str:  # as asyncio.to_thread: no turn begun there
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(chat.dispatch, name, args).result()

    refused = from_a_thread_of_its_own("peerlog_conclude", {"conclusion": "Likes tea"})  # no turn begun yet
    assert refused.startswith("error:") and "pass sender=" in refused
    chat.context_for_turn("I like green tea", sender=ada)
    chat.record_turn("I like green tea", "noted", sender=ada)
    chat.context_for_turn("ping", sender=Sender("helper", is_bot=True))
    chat.record_turn("ping", "pong")
    assert not chat.bot_turn  # the bot's turn is over
    made = json.loads(from_a_thread_of_its_own("peerlog_conclude", {"conclusion": "Ada likes green tea"}))
    assert made["created"]  # for the latest human turn begun: Ada's
    found = json.loads(from_a_thread_of_its_own("peerlog_search", {"query": "green tea"}))
    assert any("green tea" in hit["content"] for hit in found)  # searched as Ada, who saw her turn
    observer = chat.observer_of("ada")
    assert [o.content for o in chat.peer(observer).observations(target="ada")] == ["Ada likes green tea"]
    assert current_members(chat, chat.session_id) == {"ada", "bot"}  # alice, peerName, never joined the chat


def test_a_turn_begun_after_close_goes_on_without_memory(make_provider, model_server):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    memory = seeded(make_provider(dialecticCadence=1))
    before = memory.context_for_turn("hi")
    memory.record_turn("hi", "hello")
    memory.close()
    assert memory.context_for_turn("still there?") == before  # the layers it had, as a failed refresh leaves them
    assert memory.stats.failures["context"] == 1 and memory.stats.failures["dialectic"] == 1
    assert memory.dispatch("peerlog_search", {"query": "bees"}).startswith("error:")
    memory.record_turn("still there?", "yes")  # logged, not saved


def test_a_long_turn_reaches_the_dialectic_cut_at_dialectic_max_input_chars(make_provider, model_server):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    memory = seeded(make_provider(dialecticMaxInputChars=300, dialecticCadence=1, timeout=30))
    memory.peer("bot").set_card(["ATTRIBUTE: keeps bees"], target="alice")  # warm: the prompt quotes the turn
    long_turn = "My bees " + "and the hives on the roof " * 40 + "TAIL-OF-THE-TURN"
    memory.context_for_turn(long_turn)
    memory.dispatch("peerlog_reasoning", {"query": "What about " + "her bees and hives " * 40 + "TAIL-OF-THE-TOOL"})
    prompts = [prompt_text(r) for r in chats(model_server)]
    assert len(prompts) == 2
    assert "My bees and the hives" in prompts[0] and "TAIL-OF-THE-TURN" not in prompts[0]
    assert "What about her bees" in prompts[1] and "TAIL-OF-THE-TOOL" not in prompts[1]


def test_an_agent_started_while_the_server_is_down_runs_its_turns_and_writes_them_when_it_is_back(
    make_provider, api, model_server
):
    model_server.reply_with(lambda request: Reply(content=WEAK))
    memory = make_provider(timeout=1.0, writeFrequency="turn")
    api.stop()
    started = time.monotonic()
    memory.start()  # hybrid: the session and the prewarm are made in the background
    assert time.monotonic() - started < 0.5  # a loaded machine wakes threads late
    for text in ("while down 1", "while down 2"):
        started = time.monotonic()
        context = memory.context_for_turn(text)
        memory.record_turn(text, "ok")
        assert time.monotonic() - started <= 1.0 + 0.5
        assert context == ""  # nothing cached yet: the turn goes on without memory
    assert memory.writer.pending == 4
    assert memory.stats.failures["write"] + memory.stats.timeouts["write"] >= 2
    api.start()
    memory.record_turn("after", "back")
    deadline = time.monotonic() + 15
    while not memory.flush() and time.monotonic() < deadline:
        time.sleep(0.2)  # the channel reconnects with backoff
    got = [m.content for m in memory.workspace().session("global", create=False).messages()]
    assert got == ["while down 1", "ok", "while down 2", "ok", "after", "back"]


def test_an_eager_start_in_tools_mode_waits_at_most_timeout_for_a_stopped_server(make_provider, api):
    memory = make_provider(recallMode="tools", initOnSessionStart=True, timeout=1.0)
    api.stop()
    started = time.monotonic()
    memory.start()
    assert time.monotonic() - started <= 1.0 + 0.5
    assert memory.stats.failures["start"] + memory.stats.timeouts["start"] == 1
    started = time.monotonic()
    assert memory.dispatch("peerlog_search", {"query": "bees"}).startswith("error:")  # a tool says so
    assert time.monotonic() - started <= 1.0 + 0.5


def test_peerlog_memory_status_shows_the_connection_and_the_resolved_settings(
    api, settings, tmp_path, monkeypatch, capsys
):
    from peerlog_client.memory.cli import main

    for var, value in {
        "PEERLOG_TARGET": api.address,
        "PEERLOG_TOKEN": admin_token(settings) or "",
        "PEERLOG_WORKSPACE": "acme",
        "PEERLOG_MEMORY_HOME": str(tmp_path),
        "PEERLOG_MEMORY_GLOBAL": str(tmp_path / "none.json"),
    }.items():
        monkeypatch.setenv(var, value)
    Peerlog(api.address, token=admin_token(settings)).workspace("acme")
    assert main(["mode", "context"]) == 0 and main(["tokens", "--context", "900"]) == 0
    capsys.readouterr()
    assert main(["status"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["connection"].startswith("ok") and shown["target"] == api.address
    assert shown["key settings"]["recallMode"] == "context" and shown["key settings"]["contextTokens"] == 900
    assert shown["settings"]["token"] == "***"
    api.stop()
    assert main(["status"]) == 1


def test_peerlog_memory_status_on_a_fresh_setup_says_connected_and_that_the_workspace_is_not_created_yet(
    api, settings, tmp_path, monkeypatch, capsys
):
    from peerlog_client.memory.cli import main

    for var, value in {
        "PEERLOG_TARGET": api.address,
        "PEERLOG_TOKEN": admin_token(settings) or "",
        "PEERLOG_WORKSPACE": "brand-new",
        "PEERLOG_MEMORY_HOME": str(tmp_path),
        "PEERLOG_MEMORY_GLOBAL": str(tmp_path / "none.json"),
    }.items():
        monkeypatch.setenv(var, value)
    assert main(["status"]) == 0
    connection = json.loads(capsys.readouterr().out)["connection"]
    assert connection.startswith("ok") and "workspace not created yet" in connection


def test_a_provider_configured_for_tls_reaches_a_tls_server(settings, projector, pki, tmp_path):
    # it always dialled in plaintext: a server run with PEERLOG_API_TLS_CERT could not be reached at all
    tls = {"tls_cert": pki["cert"], "tls_key": pki["key"]}
    api = ApiInThread(settings.model_copy(update={"api": settings.api.model_copy(update=tls)})).start()
    secure = {"target": api.address, "token": admin_token(settings), "tls": True, "caFile": str(pki["ca"])}
    keys = {
        "host": "secure",
        "hosts": {"secure": secure},
        "workspace": "acme",
        "peerName": "alice",
        "aiPeer": "bot",
        "timeout": 30,  # the handshake, the first writes and a write read back, on a loaded machine
    }
    try:
        with MemoryProvider(validate([("test", {**keys, "writeFrequency": "turn"})]), directory=tmp_path) as memory:
            memory.record_turn("I keep bees on my roof in Lisbon", "How many hives?")
            chat = memory.client.workspace("acme").session(memory.session_id, create=False)
            assert [m.content for m in chat.messages()] == ["I keep bees on my roof in Lisbon", "How many hives?"]
            assert not memory.stats.failures and not memory.stats.timeouts
    finally:
        api.close()
