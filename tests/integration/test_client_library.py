"""peerlog_client, sync and asyncio, against the real stack: Kafka, Postgres, the projector, the API server.

The server runs on its own event loop in a thread, so the sync client can block without stalling it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from peerlog.v1 import sessions_pb2
from peerlog_client import (
    AlreadyExists,
    AsyncPeerlog,
    Configuration,
    DeadlineExceeded,
    EffectiveConfiguration,
    FailedPrecondition,
    InvalidArgument,
    MemberSpec,
    NewMessage,
    NewObservation,
    NotFound,
    ObservationSource,
    Peerlog,
    RetryPolicy,
    Unauthenticated,
    Unavailable,
)
from peerlog_client.models import ChatAnswer, ChatText
from services.cli.client import Client
from services.dialectic.settings import DialecticSettings
from services.llm.settings import LlmSettings
from tests.support.model_server import Reply


class ApiInThread:
    """The API server on its own event loop; stop() and start() again keep its port."""

    def __init__(self, settings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = None

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def start(self) -> ApiInThread:
        from services.api.server import start

        self.server = self._run(start(self.settings))
        self.settings = self.settings.model_copy(
            update={"api": self.settings.api.model_copy(update={"port": self.server.port})}
        )
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.settings.api.port}"

    def stop(self) -> None:
        if self.server is not None:
            self._run(self.server.stop(0))
            self.server = None

    def close(self) -> None:
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def admin_token(settings) -> str | None:
    """An admin token when the server checks tokens (another change is wiring JWT auth in), else None."""
    auth = getattr(settings, "auth", None)
    if auth is None or not auth.enabled or not auth.secret.get_secret_value():
        return None
    from services.api.tokens import mint

    return mint(auth, ["admin"])


@pytest.fixture
def api(settings, projector, model_server) -> Iterator[ApiInThread]:
    llm = LlmSettings(base_url=model_server.base_url, model="test-model", timeout_s=5, max_retries=0)
    running = ApiInThread(settings.model_copy(update={"llm": llm, "dialectic": DialecticSettings()})).start()
    yield running
    running.close()


@pytest.fixture
def token(settings) -> str | None:
    return admin_token(settings)


@pytest.fixture
def peerlog(api, token) -> Iterator[Peerlog]:
    with Peerlog(api.address, token=token, timeout=20) as client:
        yield client


def conversation(peerlog: Peerlog, session_id: str = "s1"):
    ws = peerlog.workspace("acme")
    alice, bot = ws.peer("alice"), ws.peer("bot")
    return ws, alice, bot, ws.session(session_id, members=[alice, bot])


def test_a_read_after_a_write_sees_it_without_passing_a_token(peerlog):
    ws, alice, bot, chat = conversation(peerlog)
    for i in range(5):
        added = chat.add_messages([alice.message(f"turn {i}"), (bot, f"answer {i}")])
        assert ws.message(added.message_ids[1]).content == f"answer {i}"
        assert chat.refresh().message_count == 2 * (i + 1)


def test_every_write_is_awaited_not_only_the_last(peerlog):
    # writes to two sessions land on different partitions; the read of the first must wait for it too
    ws, alice, bot, s1 = conversation(peerlog)
    s2 = ws.session("s2", members=[alice])
    first = s1.add_messages([(alice, "in s1")])
    s2.add_messages([(alice, "in s2")])
    assert [m.content for m in s1.messages()] == ["in s1"]
    assert ws.message(first.message_ids[0]).session_id == "s1"
    for part in first.consistency_token.split(","):
        topic_partition, offset = part.rsplit(":", 1)
        merged = dict(p.rsplit(":", 1) for p in peerlog.consistency_token.split(","))
        assert int(merged[topic_partition]) >= int(offset)


def test_a_missing_session_raises_NotFound_with_the_servers_message(peerlog, api, token):
    ws = peerlog.workspace("acme")
    with pytest.raises(NotFound) as raised:
        ws.session("nope", create=False)

    async def raw() -> str:
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        async with grpc.aio.insecure_channel(api.address) as chan:
            try:
                await Client(chan).sessions.GetSession(
                    sessions_pb2.GetSessionRequest(workspace_id="acme", session_id="nope"), metadata=metadata
                )
            except grpc.aio.AioRpcError as error:
                return error.details()
        raise AssertionError("GetSession of a missing session succeeded")

    assert str(raised.value) == asyncio.run(raw())
    assert "nope" in str(raised.value) and raised.value.code == grpc.StatusCode.NOT_FOUND


def test_refusals_become_their_own_exception_classes(peerlog):
    ws, alice, bot, chat = conversation(peerlog)
    with pytest.raises(InvalidArgument, match="content"):
        chat.add_messages([(alice, "   ")])
    with pytest.raises(AlreadyExists, match="already members"):
        chat.add_members(alice)
    with pytest.raises(FailedPrecondition):
        chat.remove_members("ghost")
    with pytest.raises(NotFound):
        ws.peer("ghost", create=False)


def test_a_peer_named_later_sends_its_next_messages_under_the_name(peerlog):
    ws, alice, bot, chat = conversation(peerlog)
    chat.add_messages([(alice, "before the name")])
    assert alice.set_metadata({"name": "Alice Moreau", "team": "data"}).metadata == {
        "name": "Alice Moreau",
        "team": "data",
    }
    chat.add_messages([(alice, "after the name")])
    shown = {m.content: m.author_name for m in chat.context(tokens=500).messages}
    assert shown == {"before the name": "", "after the name": "Alice Moreau"}
    with pytest.raises(InvalidArgument, match="display name"):
        alice.set_metadata({"name": ""})


def test_iterating_messages_follows_every_page(peerlog):
    _, alice, bot, chat = conversation(peerlog)
    for start in range(0, 230, 100):
        chat.add_messages([(alice if i % 2 else bot, f"message {i}") for i in range(start, min(start + 100, 230))])
    got = list(chat.messages(page_size=7))
    assert [m.content for m in got] == [f"message {i}" for i in range(230)]
    assert [m.seq for m in got] == list(range(1, 231))
    assert [m.content for m in chat.messages(reverse=True, page_size=50)][:2] == ["message 229", "message 228"]


def test_iterating_workspaces_peers_sessions_and_observations_follows_every_page(peerlog):
    ws = peerlog.workspace("acme")
    peers = [ws.peer(f"p{i:02}") for i in range(12)]
    for i in range(5):
        ws.session(f"s{i}", members=peers[:2])
    peerlog.workspace("zeta")
    made = peers[0].create_observations([f"fact {i}" for i in range(9)], target=peers[1])
    assert [p.peer_id for p in ws.peers(page_size=5)] == [f"p{i:02}" for i in range(12)]
    assert [s.session_id for s in ws.sessions(page_size=2)] == [f"s{i}" for i in range(5)]
    assert [s.session_id for s in peers[1].sessions(page_size=2)] == [f"s{i}" for i in range(5)]
    assert {"acme", "zeta"} <= {w.workspace_id for w in peerlog.workspaces(page_size=1)}
    observed = list(peers[0].observations(target=peers[1], page_size=4))
    assert [o.observation_id for o in observed] == list(made.observation_ids)
    assert {o.level for o in observed} == {"explicit"}


def test_the_async_client_does_the_same_over_asyncio(api, token):
    async def scenario() -> None:
        async with AsyncPeerlog(api.address, token=token, timeout=20) as peerlog:
            ws = await peerlog.workspace("acme", metadata={"plan": "pro"})
            alice = await ws.peer("alice")
            bot = await ws.peer("bot", observe_me=False)
            chat = await ws.session("s1", members=[alice, MemberSpec("bot", observe_others=True)])
            await chat.add_messages([(alice, f"line {i}") for i in range(30)])
            got = [m.content async for m in chat.messages(page_size=4)]
            assert got == [f"line {i}" for i in range(30)]
            assert ws.info.metadata == {"plan": "pro"} and ws.created and not bot.info.observe_me
            assert chat.info.members == ("alice", "bot")
            with pytest.raises(NotFound):
                await ws.session("nope", create=False)
            ctx = await chat.context(tokens=500, observer=alice, assistant=bot)
            assert ctx.to_openai()[-1] == {"role": "user", "content": "line 29", "name": "alice"}

    asyncio.run(scenario())


def test_unavailable_reads_are_retried_then_raise(api):
    address = api.address
    api.stop()
    policy = RetryPolicy(max_attempts=4, initial_backoff=0.1, max_backoff=1.0)
    with Peerlog(address, timeout=10, retry=policy) as peerlog:
        started = time.monotonic()
        with pytest.raises(Unavailable) as raised:
            peerlog.workspace("acme", create=False)
        elapsed = time.monotonic() - started
    assert raised.value.attempts == 4
    assert elapsed >= (0.1 + 0.2 + 0.4) * 0.5  # the three waits, at their least jitter


def test_writes_are_not_retried_while_they_carry_no_idempotency_key(api):
    address = api.address
    api.stop()
    with Peerlog(address, timeout=10) as peerlog, pytest.raises(Unavailable) as raised:
        peerlog.workspace("acme")  # GetOrCreateWorkspace writes
    assert raised.value.attempts == 1
    assert raised.value.idempotency_key is None  # a write without a key has none to repeat under


def test_a_read_is_retried_through_a_server_restart(api, token):
    with Peerlog(api.address, token=token, timeout=15, retry=RetryPolicy(max_attempts=10, max_backoff=1.0)) as peerlog:
        peerlog.workspace("acme")
        api.stop()
        restart = threading.Timer(0.5, api.start)
        restart.start()
        try:
            assert peerlog.workspace("acme", create=False).id == "acme"
        finally:
            restart.join()


def test_a_write_is_retried_through_a_server_restart_under_one_key_and_stored_once(api, token):
    with Peerlog(api.address, token=token, timeout=20, retry=RetryPolicy(max_attempts=10, max_backoff=1.0)) as peerlog:
        ws = peerlog.workspace("acme")
        chat = ws.session("s1", members=[ws.peer("alice")])
        api.stop()
        restart = threading.Timer(0.5, api.start)
        restart.start()
        try:
            added = chat.add_messages([("alice", "through the restart")])
        finally:
            restart.join()
        again = chat.add_messages([("alice", "through the restart")], idempotency_key="mine")
        assert chat.add_messages([("alice", "through the restart")], idempotency_key="mine") == again
        assert [m.message_id for m in chat.messages()] == [*added.message_ids, *again.message_ids]


def test_a_keyed_write_that_times_out_tells_the_caller_its_key_and_a_retry_under_it_stores_nothing_twice(
    api, projector, token
):
    with (
        Peerlog(api.address, token=token, timeout=20) as patient,
        Peerlog(api.address, token=token, timeout=5) as hasty,  # far below the server's wait of 15 s
    ):
        ws = patient.workspace("acme")
        chat = ws.session("s1", members=[ws.peer("alice")])
        hasty_chat = hasty.workspace("acme", create=False).session("s1", create=False)
        projector.stop()  # a keyed write answers once readable: now only after the client's deadline
        try:
            with pytest.raises(DeadlineExceeded) as raised:
                hasty_chat.add_messages([("alice", "slow to be readable")])  # the client mints the key
        finally:
            projector.start()
        assert raised.value.idempotency_key
        again = chat.add_messages([("alice", "slow to be readable")], idempotency_key=raised.value.idempotency_key)
        assert [m.message_id for m in chat.messages()] == list(again.message_ids)  # the write that timed out


def test_the_deadline_bounds_every_call_retries_included(api):
    address = api.address
    api.stop()
    with Peerlog(address, timeout=0.6, retry=RetryPolicy(max_attempts=50, initial_backoff=0.1)) as peerlog:
        started = time.monotonic()
        with pytest.raises(Unavailable):
            peerlog.workspace("acme", create=False)
    assert time.monotonic() - started < 1.0


def test_the_bearer_token_is_what_lets_a_call_in(api, token):
    if token is None:
        pytest.skip("this server does not check tokens")
    with Peerlog(api.address, token=token, timeout=20) as authed:
        assert authed.workspace("acme").id == "acme"
    with Peerlog(api.address, timeout=20) as anonymous, pytest.raises(Unauthenticated, match="Bearer"):
        anonymous.workspace("acme", create=False)


def test_session_context_renders_for_openai_and_anthropic(peerlog):
    ws, alice, bot, chat = conversation(peerlog)
    alice.create_observations(["Alice lives in Lisbon"])
    alice.set_card(["IDENTITY: Alice, a data engineer"])
    chat.add_messages([(alice, "hi"), (bot, "hello Alice"), (alice, "what should I cook tonight?")])
    ctx = chat.context(tokens=2000, observer=alice, assistant=bot)

    openai = ctx.to_openai()
    assert openai[0]["role"] == "system"
    assert "Alice lives in Lisbon" in openai[0]["content"] and "IDENTITY: Alice" in openai[0]["content"]
    assert openai[1:] == [
        {"role": "user", "content": "hi", "name": "alice"},
        {"role": "assistant", "content": "hello Alice", "name": "bot"},
        {"role": "user", "content": "what should I cook tonight?", "name": "alice"},
    ]
    system, messages = ctx.to_anthropic()
    assert system == openai[0]["content"]
    assert messages == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello Alice"},
        {"role": "user", "content": "what should I cook tonight?"},
    ]
    assert ctx.tokens.total <= 2000 and ctx.peer_card == ("IDENTITY: Alice, a data engineer",)
    assert [(m.role, m.content) for m in ctx.chat_messages][-1] == ("user", "what should I cook tonight?")


def test_searches_find_messages_at_workspace_session_and_peer_level(peerlog):
    ws, alice, bot, chat = conversation(peerlog)
    chat.add_messages([(alice, "I keep bees in my garden"), (bot, "bees are lovely"), (alice, "my car broke down")])
    before = datetime.now(UTC)
    assert ws.search("bees garden", limit=1)[0].message.content == "I keep bees in my garden"
    assert {r.message.peer_id for r in chat.search("bees", authors=[bot])} == {"bot"}
    assert all(r.message.peer_id == "alice" for r in alice.search("bees"))
    assert ws.search("bees", after=before) == ()


def test_a_search_cut_short_by_the_reply_size_says_so_through_the_client(peerlog):
    ws, alice, bot, chat = conversation(peerlog, "big")
    body = "zebra " + "€€€€€ " * 4160  # ~66 kB of UTF-8: 100 of them pass the 4 MiB a reply may hold
    chat.add_messages([(alice, body)] * 100)
    hits = chat.search("zebra", limit=100)
    assert hits.truncated and 40 <= len(hits) < 100 and hits[0].message.content == body
    fewer = ws.search("zebra", limit=10)
    assert not fewer.truncated and len(fewer) == 10


def test_observations_round_trip_with_sources_search_history_and_deletion(peerlog):
    ws, alice, bot, chat = conversation(peerlog)
    sent = chat.add_messages([(alice, "I moved to Oslo last year")])
    made = bot.create_observations(
        [
            NewObservation(
                "Alice lives in Oslo",
                session_id="s1",
                sources=(ObservationSource(sent.message_ids[0], "moved to Oslo"),),
            )
        ],
        target=alice,
    )
    (oid,) = made.observation_ids
    got = ws.observation(oid)
    assert (got.content, got.level, got.observer_id, got.observed_id) == (
        "Alice lives in Oslo",
        "explicit",
        "bot",
        "alice",
    )
    assert got.sources == (ObservationSource(sent.message_ids[0], "moved to Oslo"),)
    assert got.created_at.tzinfo is not None and got.deleted_at is None
    assert bot.search_observations("Oslo", target=alice)[0].observation.observation_id == oid
    assert ws.provenance(oid).nodes[0].source_messages[0].content == "I moved to Oslo last year"
    assert [e.kind for e in ws.observation_history(oid)] == ["added"]
    ws.delete_observation(oid, reason="wrong")
    assert list(bot.observations(target=alice)) == []
    assert ws.observation(oid).delete_reason == "wrong"
    assert bot.representation(target=alice).observations == ()
    assert ws.processing_status().counts is not None and list(ws.rejected_observations()) == []


def test_cards_summaries_members_and_dreams(peerlog):
    ws, alice, bot, chat = conversation(peerlog)
    card = bot.set_card(["ATTRIBUTE: likes tea"], target=alice)
    assert bot.card(target=alice).entries == card.entries == ("ATTRIBUTE: likes tea",)
    assert chat.summaries().short_summary is None
    assert chat.remove_members(bot).members == ("alice",)
    assert chat.add_members(MemberSpec("bot", observe_others=True)).memberships[-1].observe_others
    bot.schedule_dream(target=alice, reason="test")
    assert [d.reason for d in bot.dreams(target=alice)] in ([], ["forced"])


def test_chat_answers_and_streams_through_the_test_model(peerlog, model_server):
    ws, alice, bot, chat = conversation(peerlog)
    alice.create_observations(["Alice lives in Lisbon"])
    model_server.script([Reply(content="Alice lives in Lisbon."), Reply(content="Lisbon.")])
    answer = alice.chat("Where does Alice live?", level="minimal")
    assert isinstance(answer, ChatAnswer) and answer.answer == "Alice lives in Lisbon."
    events = list(alice.chat_stream("Where?", level="minimal"))
    assert isinstance(events[-1], ChatAnswer) and events[-1].answer == "Lisbon."
    assert "".join(e.text for e in events if isinstance(e, ChatText)) == "Lisbon."
    with pytest.raises(ValueError, match="minimal, low, medium, high, max"):
        alice.chat("Where?", level="extreme")
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    model_server.script([Reply(content=json.dumps({"city": "Lisbon"}))])
    assert json.loads(alice.chat("Where?", level="minimal", response_format=schema).answer) == {"city": "Lisbon"}


def test_the_readme_example_runs(api, token, monkeypatch, capsys):
    readme = (Path(__file__).resolve().parents[2] / "clients" / "python" / "README.md").read_text()
    example = readme.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("PEERLOG_TARGET", api.address)
    if token:
        monkeypatch.setenv("PEERLOG_TOKEN", token)
    else:
        monkeypatch.delenv("PEERLOG_TOKEN", raising=False)
    exec(compile(example, "clients/python/README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "Bees in Lisbon! How are they doing?" in out and "explicit Alice keeps bees" in out
    assert "not found: session 'no-such-chat'" in out


def test_configuration_levels_are_set_and_read_back_as_typed_values(peerlog):
    ws, alice, bot, chat = conversation(peerlog)
    assert ws.set_configuration(Configuration(observe_others=True, summary_short_every=7)).consistency_token
    chat.set_configuration(Configuration(observe_others=False, deriver_instructions="food only"))
    added = chat.add_messages([NewMessage("alice", "hi", configuration=Configuration(summary_short_every=2))])

    session = chat.configuration()
    assert isinstance(session, EffectiveConfiguration)
    assert (session.values.observe_others, session.levels["observe_others"]) == (False, "session")
    assert (session.values.summary_short_every, session.levels["summary_short_every"]) == (7, "workspace")
    assert (session.values.reasoning, session.levels["reasoning"]) == (True, "global")
    message = ws.message_configuration(added.message_ids[0])
    assert (message.values.summary_short_every, message.levels["summary_short_every"]) == (2, "message")
    assert message.values.deriver_instructions == "food only"
    assert ws.configuration(as_of=datetime(2000, 1, 1, tzinfo=UTC)).levels["observe_others"] == "global"
    chat.set_message_configuration(added.message_ids[0], Configuration(peer_card=False))
    later = ws.message_configuration(added.message_ids[0])
    assert (later.values.peer_card, later.levels["peer_card"]) == (False, "message")
    assert (later.values.summary_short_every, later.levels["summary_short_every"]) == (7, "workspace")  # replaced whole


def test_the_async_client_sets_and_reads_configuration_levels(api, token):
    async def scenario() -> None:
        async with AsyncPeerlog(api.address, token=token, timeout=20) as peerlog:
            ws = await peerlog.workspace("acme")
            chat = await ws.session("s1", members=[await ws.peer("alice")])
            await ws.set_configuration(Configuration(dreams=False))
            await chat.set_configuration(Configuration(dreams=True, dream_threshold=5))
            session = await chat.configuration()
            assert (session.values.dreams, session.levels["dreams"]) == (True, "session")
            assert (session.values.dream_threshold, session.levels["dream_threshold"]) == (5, "session")
            assert (await ws.configuration()).levels["dreams"] == "workspace"
            await ws.set_configuration(Configuration())  # a level set empty inherits everything again
            assert set((await ws.configuration()).levels.values()) == {"global"}

    asyncio.run(scenario())
