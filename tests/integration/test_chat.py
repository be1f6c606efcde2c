"""Chat / ChatStream: the dialectic agent over real Kafka, Postgres and the HTTP test model server."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import grpc
import pytest
from google.protobuf import timestamp_pb2

from peerlog.v1 import dialectic_pb2 as d
from peerlog.v1 import dialectic_pb2_grpc, messages_pb2, workspaces_pb2
from peerlog.v1 import observations_pb2 as o
from services.cli.client import Client
from services.dialectic.policy import ABSTAIN_ANSWER
from services.dialectic.settings import DialecticSettings
from services.llm.settings import LlmSettings
from tests.integration.test_message_search import embedded_count
from tests.support.auth import admin_channel
from tests.support.model_server import Reply
from tests.support.rpc import rejected
from tests.support.wait import eventually, until_true

CAPS = {
    d.REASONING_LEVEL_MINIMAL: 1,
    d.REASONING_LEVEL_LOW: 5,
    d.REASONING_LEVEL_MEDIUM: 2,
    d.REASONING_LEVEL_HIGH: 4,
    d.REASONING_LEVEL_MAX: 10,
}


@pytest.fixture
async def serve(settings, projector, model_server, monkeypatch):
    """Start an API server whose Chat talks to the test model server; env: extra PEERLOG_* settings, `api`:
    ApiSettings fields to change."""
    from services.api.server import start

    running = []

    async def start_with(api: dict | None = None, **env: str) -> grpc.aio.Channel:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        llm = LlmSettings(base_url=model_server.base_url, model="test-model", timeout_s=5, max_retries=0)
        update = {"llm": llm, "dialectic": DialecticSettings(), "api": settings.api.model_copy(update=api or {})}
        server = await start(settings.model_copy(update=update))
        chan = admin_channel(settings, server.port)
        running.append((server, chan))
        return chan

    yield start_with
    for server, chan in running:
        await chan.close()
        await server.stop(0)


@pytest.fixture
async def memory(serve):
    """alice and bob talk in s; bob tells carol a secret in s2 (alice is not there). alice knows two
    things about bob, with sources; carol knows the secret."""
    chan = await serve()
    c = Client(chan)
    await c.setup_conversation("w", "s", peers=("alice", "bob", "carol"))
    await c.session("w", "s", members=("alice", "bob"))
    await c.session("w", "s2", members=("bob", "carol"))
    sent = await c.add(
        "w", "s", [("bob", "I keep bees in my garden"), ("alice", "cool"), ("bob", "I moved to Oslo last year")]
    )
    secret = await c.add("w", "s2", [("bob", "I love sailing but tell nobody")])
    bees, _, oslo = sent.message_ids
    await c.list_messages("w", "s", sent.consistency_token)  # observations may cite only projected messages
    await c.list_messages("w", "s2", secret.consistency_token)
    made = await c.create_observations(
        "w",
        "alice",
        "bob",
        [
            o.NewObservation(
                content="Bob keeps bees",
                session_id="s",
                sources=[o.ObservationSource(message_id=bees, span="I keep bees")],
            ),
            o.NewObservation(
                content="Bob lives in Oslo",
                session_id="s",
                sources=[o.ObservationSource(message_id=oslo, span="moved to Oslo")],
            ),
        ],
    )
    hidden = await c.create_observations(
        "w",
        "carol",
        "bob",
        [
            o.NewObservation(
                content="Bob loves sailing",
                sources=[o.ObservationSource(message_id=secret.message_ids[0], span="sailing")],
            )
        ],
    )
    await c.all_observations("w", "carol", "bob", hidden.consistency_token)
    await c.all_observations("w", "alice", "bob", made.consistency_token)
    return {
        "chan": chan,
        "bees": bees,
        "oslo": oslo,
        "secret": secret.message_ids[0],
        "obs": list(made.observation_ids),
        "hidden_obs": hidden.observation_ids[0],
    }


def ask(chan, **kw):
    base = {"workspace_id": "w", "observer_id": "alice", "target_id": "bob", "query": "Where does Bob live?"}
    return dialectic_pb2_grpc.DialecticServiceStub(chan).Chat(d.ChatRequest(**{**base, **kw}))


def stream(chan, **kw):
    base = {"workspace_id": "w", "observer_id": "alice", "target_id": "bob", "query": "Where does Bob live?"}
    return dialectic_pb2_grpc.DialecticServiceStub(chan).ChatStream(d.ChatRequest(**{**base, **kw}))


def call(name: str, call_id: str = "call_1", **arguments) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def tool_messages(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def offered(request: dict) -> list[str]:
    return sorted(t["function"]["name"] for t in request.get("tools", []))


async def test_chat_calls_a_tool_and_the_result_reaches_the_model_in_the_next_request(memory, model_server):
    model_server.script([Reply(tool_calls=[call("grep_messages", pattern="OSLO")])])
    model_server.reply_with(lambda req: Reply(content=f"Bob lives in Oslo [msg:{memory['oslo']}]"))

    out = await ask(memory["chan"])

    first, second = model_server.chat_requests()
    assert "grep_messages" in offered(first)
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "grep_messages"
    assert tool_messages(second) and "I moved to Oslo last year" in tool_messages(second)[0]
    assert out.answer == f"Bob lives in Oslo [msg:{memory['oslo']}]" and out.tool_rounds == 1
    assert list(out.cited_message_ids) == [memory["oslo"]] and out.model == "test-model" and not out.abstained
    assert out.prompt_version == "dialectic-3"


async def test_chat_calls_a_display_named_peer_by_its_name_beside_its_id_in_prompt_and_tools(memory, model_server):
    from tests.integration.test_peer_names import named

    c = Client(memory["chan"])
    await c.peer("w", "u-7f3a", metadata=named("Maria Lopez"))
    await c.session("w", "s", members=("u-7f3a",))
    sent = await c.add("w", "s", [("u-7f3a", "I sold my OSLO flat")])
    await c.list_messages("w", "s", sent.consistency_token)
    model_server.script([Reply(tool_calls=[call("grep_messages", pattern="oslo")])])
    model_server.reply_with(lambda req: Reply(content="Bob lives in Oslo"))

    await ask(memory["chan"], target_id="u-7f3a", query="Did Maria sell her flat?")

    first, second = model_server.chat_requests()
    assert "what alice knows about Maria Lopez (u-7f3a)" in first["messages"][0]["content"]
    shown = tool_messages(second)[0]
    assert "Maria Lopez (u-7f3a): I sold my OSLO flat" in shown and "bob: I moved to Oslo last year" in shown


async def test_the_prompt_carries_the_prefetched_observations_with_their_ids(memory, model_server):
    model_server.script([Reply(content="Oslo")])
    await ask(memory["chan"], session_id="s")
    user = model_server.chat_requests()[0]["messages"][1]["content"]
    assert f"[obs:{memory['obs'][1]}]" in user and "Bob lives in Oslo" in user
    assert f"[msg:{memory['oslo']}]" in user  # the session's recent history
    assert "sailing" not in user


async def test_the_prompt_says_when_the_question_is_asked_in_the_askers_time_zone(memory, model_server):
    model_server.script([Reply(content="Oslo"), Reply(content="Oslo")])
    await asyncio.sleep(1.1)  # a whole second after all the fixture wrote: memory as of it holds all of it
    before = datetime.now(UTC).replace(microsecond=0)
    await ask(memory["chan"], time_zone="Asia/Tokyo")
    await ask(memory["chan"], as_of=timestamp_pb2.Timestamp(seconds=int(before.timestamp())))
    asked, then = (r["messages"][1]["content"] for r in model_server.chat_requests())
    tokyo = before.astimezone(ZoneInfo("Asia/Tokyo"))
    assert f"Asked at: {tokyo:%Y-%m-%d} " in asked and f"(Asia/Tokyo, {before:%Y-%m-%d} " in asked
    assert f"Memory as it stood at: {before:%Y-%m-%d %H:%M} (UTC, {before:%Y-%m-%d %H:%M} UTC)." in then


async def test_only_ids_the_agent_was_shown_are_cited(memory, model_server):
    oslo_obs = memory["obs"][1]
    # the secret message and carol's observation exist, but alice's agent was never shown them
    answer = f"Oslo [obs:{oslo_obs}] [obs:made-up-id] [msg:{memory['secret']}] [obs:{memory['hidden_obs']}]"
    model_server.script([Reply(content=answer)])
    out = await ask(memory["chan"])
    assert list(out.cited_observation_ids) == [oslo_obs] and list(out.cited_message_ids) == []
    assert out.answer.strip() == f"Oslo [obs:{oslo_obs}]"


@pytest.mark.parametrize("level,cap", sorted(CAPS.items()))
async def test_a_model_that_always_wants_tools_is_cut_off_at_the_level_cap_and_made_to_answer(
    serve, memory, model_server, level, cap
):
    # a budget the cap is reached within: every call's tool specs count toward it (~1,350 tokens), and at
    # the default 32,000 the budget ends the loop of `max` first
    chan = await serve(PEERLOG_DIALECTIC_TOKEN_BUDGET="64000")
    model_server.reply_with(
        lambda req: Reply(
            content="Bob lives in Oslo" if "tools" not in req else "",
            tool_calls=[call("search_observations", query="home")],
        )
    )
    out = await ask(chan, reasoning_level=level)
    requests = model_server.chat_requests()
    assert out.tool_rounds == cap and len(requests) == cap + 1
    assert all("tools" in r for r in requests[:-1]) and "tools" not in requests[-1]
    assert "used all your tool rounds" in requests[-1]["messages"][-1]["content"]
    assert out.answer == "Bob lives in Oslo"


async def test_minimal_level_offers_only_the_two_search_tools(memory, model_server):
    model_server.script([Reply(content="Oslo")])
    await ask(memory["chan"], reasoning_level=d.REASONING_LEVEL_MINIMAL)
    assert offered(model_server.chat_requests()[0]) == ["search_messages", "search_observations"]
    model_server.reset()
    model_server.script([Reply(content="Oslo")])
    await ask(memory["chan"], reasoning_level=d.REASONING_LEVEL_HIGH)
    assert len(offered(model_server.chat_requests()[0])) == 7


async def test_streaming_sends_tool_progress_then_the_answer_in_chunks_then_the_citations(memory, model_server):
    model_server.script([Reply(tool_calls=[call("search_messages", query="Oslo")])])
    model_server.reply_with(lambda req: Reply(content=f"Bob moved to Oslo last year [msg:{memory['oslo']}]"))

    chunks = [chunk async for chunk in stream(memory["chan"])]

    kinds = [chunk.WhichOneof("event") for chunk in chunks]
    assert kinds[0] == "tool" and kinds[-1] == "done" and kinds.count("text") > 3
    assert chunks[0].tool.tool == "search_messages" and chunks[0].tool.results >= 1
    text = "".join(chunk.text for chunk in chunks if chunk.WhichOneof("event") == "text")
    done = chunks[-1].done
    assert text == done.answer == f"Bob moved to Oslo last year [msg:{memory['oslo']}]"
    assert list(done.cited_message_ids) == [memory["oslo"]] and done.tool_rounds == 1
    assert model_server.chat_requests()[-1]["stream"] is True


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


async def test_a_response_format_answer_comes_back_as_valid_json(memory, model_server):
    model_server.script([Reply(content='```json\n{"city": "Oslo"}\n```')])
    out = await ask(memory["chan"], response_format=d.ResponseFormat(json_schema=json.dumps(SCHEMA)))
    assert json.loads(out.answer) == {"city": "Oslo"}
    assert '"required":["city"]' in model_server.chat_requests()[0]["messages"][0]["content"]


async def test_an_answer_that_breaks_the_schema_is_repaired_once(memory, model_server):
    model_server.script([Reply(content='{"town": "Oslo"}'), Reply(content='{"city": "Oslo"}')])
    fmt = d.ResponseFormat()
    fmt.json_schema_object.update(SCHEMA)
    out = await ask(memory["chan"], response_format=fmt)
    assert json.loads(out.answer) == {"city": "Oslo"}
    repair = model_server.chat_requests()[1]["messages"][-1]["content"]
    assert "did not match the required JSON schema" in repair and "city" in repair


async def test_an_answer_still_invalid_after_the_repair_is_a_clear_error(memory, model_server):
    model_server.script([Reply(content="Oslo, I think"), Reply(content='{"city": 7}')])
    await rejected(
        ask(memory["chan"], response_format=d.ResponseFormat(json_schema=json.dumps(SCHEMA))),
        grpc.StatusCode.INTERNAL,  # not UNAVAILABLE: the client library would re-run the Chat
        "response_format after one repair",
    )


async def test_structured_tool_mode_works_end_to_end(serve, memory, model_server):
    chan = await serve(
        PEERLOG_LLM_DIALECTIC_LOW_TOOL_MODE="structured", PEERLOG_LLM_DIALECTIC_LOW_SCHEMA_MODE="json_object"
    )
    model_server.script([Reply(content={"tool": "grep_messages", "arguments": {"pattern": "bees"}})])
    model_server.reply_with(
        lambda req: Reply(content={"answer": "Bob keeps bees", "cited_ids": [memory["bees"], "fake"]})
    )

    out = await ask(chan, query="What does Bob keep?")

    first, second = model_server.chat_requests()
    assert "tools" not in first and first["response_format"] == {"type": "json_object"}
    assert "grep_messages" in first["messages"][0]["content"]
    assert "Result of grep_messages" in second["messages"][-1]["content"]
    assert "I keep bees in my garden" in second["messages"][-1]["content"]
    assert out.answer == "Bob keeps bees" and list(out.cited_message_ids) == [memory["bees"]] and out.tool_rounds == 1


async def test_a_json_answer_cut_at_max_tokens_names_the_setting_without_a_repair(memory, model_server):
    model_server.script([Reply(content='{"city": "Os', finish_reason="length")])
    await rejected(
        ask(memory["chan"], response_format=d.ResponseFormat(json_schema=json.dumps(SCHEMA))),
        grpc.StatusCode.INTERNAL,
        "PEERLOG_LLM_DIALECTIC_LOW_MAX_TOKENS",
    )
    assert len(model_server.chat_requests()) == 1  # a repair would have stopped at the same limit


async def test_an_answer_cut_at_max_tokens_before_any_text_is_an_error_not_nothing_in_memory(memory, model_server):
    # a reasoning model may spend all of max_tokens thinking: read as an abstention, the user was told memory
    # holds nothing though the evidence was in the prompt
    model_server.script([Reply(content="", finish_reason="length")])
    await rejected(ask(memory["chan"]), grpc.StatusCode.INTERNAL, "PEERLOG_LLM_DIALECTIC_LOW_MAX_TOKENS")


async def test_a_tool_request_after_the_tools_are_withdrawn_is_repaired_not_taken_for_no_answer(
    serve, memory, model_server
):
    chan = await serve(
        PEERLOG_LLM_DIALECTIC_LOW_TOOL_MODE="structured", PEERLOG_LLM_DIALECTIC_LOW_SCHEMA_MODE="json_object"
    )
    wants_tool = Reply(content={"tool": "grep_messages", "arguments": {"pattern": "bees"}})
    # five rounds of tools (the level's cap), then still a tool request, then the answer once repaired
    model_server.script([wants_tool] * 6 + [Reply(content={"answer": "Bob keeps bees", "cited_ids": []})])

    out = await ask(chan, query="What does Bob keep?")

    assert out.answer == "Bob keeps bees" and not out.abstained and out.tool_rounds == CAPS[d.REASONING_LEVEL_LOW]
    assert "not valid JSON for the required schema" in model_server.chat_requests()[-1]["messages"][-1]["content"]


async def test_tool_calls_a_server_sends_after_the_tools_are_withdrawn_are_an_error_not_no_answer(memory, model_server):
    # a server that sends calls though none were offered: taken as the answer, its empty text read
    # "nothing in memory tells me that", after five rounds of evidence
    model_server.reply_with(lambda req: Reply(tool_calls=[call("search_observations", query="home")]))
    await rejected(ask(memory["chan"]), grpc.StatusCode.INTERNAL, "after they were withdrawn")


async def test_with_nothing_about_the_pair_it_says_it_does_not_know_without_calling_a_model(memory, model_server):
    # carol never spoke where alice could hear, and alice holds no observations about her
    out = await ask(memory["chan"], target_id="carol", query="What does Carol do?")
    assert out.answer == ABSTAIN_ANSWER and out.abstained and out.model == ""
    assert not out.cited_observation_ids and not out.cited_message_ids
    assert model_server.chat_requests() == []


async def test_an_answer_made_up_when_tools_found_nothing_is_replaced_by_i_do_not_know(memory, model_server):
    # bob has no observations about alice, but alice spoke where bob heard: the agent runs, finds nothing
    model_server.script(
        [Reply(tool_calls=[call("grep_messages", pattern="zebra")]), Reply(content="Alice owns a zebra [obs:invented]")]
    )
    out = await ask(memory["chan"], observer_id="bob", target_id="alice", query="Does Alice own a zebra?")
    assert "No messages found" in tool_messages(model_server.chat_requests()[1])[0]
    assert out.answer == ABSTAIN_ANSWER and out.abstained and not out.cited_observation_ids


async def test_no_tool_shows_a_message_the_observer_never_saw_nor_another_pairs_observation(memory, model_server):
    model_server.script(
        [
            Reply(
                tool_calls=[
                    call("grep_messages", "c1", pattern="sailing"),
                    call("search_messages", "c2", query="sailing"),
                    call("temporal_search", "c3", query="sailing", after="2000-01-01"),
                    call("messages_by_date_range", "c4", after="2000-01-01T00:00:00Z", limit=50),
                    call("source_messages", "c5", observation_id=memory["hidden_obs"]),
                    call("reasoning_chain", "c6", observation_id=memory["hidden_obs"]),
                    call("search_observations", "c7", query="sailing", limit=50),
                    call("source_messages", "c8", observation_id=memory["obs"][0]),
                ]
            )
        ]
    )
    model_server.reply_with(lambda req: Reply(content="Bob keeps bees"))

    await ask(memory["chan"], query="Does Bob like sailing?", reasoning_level=d.REASONING_LEVEL_HIGH)

    results = tool_messages(model_server.chat_requests()[1])
    assert len(results) == 8
    everything = "\n".join(results)
    assert "sailing" not in everything.lower() and memory["secret"] not in everything
    assert memory["hidden_obs"] not in everything.replace(f"No observation {memory['hidden_obs']}", "")
    assert "I moved to Oslo last year" in results[3]  # the date range does list what alice saw
    assert "span: 'I keep bees'" in results[7]  # and an own observation's source is shown


async def test_a_perspective_peer_bounds_the_messages_chat_reads_to_those_it_saw(memory, model_server):
    # bob was in both sessions, as an assistant is in every user's; asked on alice's behalf, it must not
    # quote what bob told carol where alice was not
    tools = [
        call("grep_messages", "c1", pattern="sailing"),
        call("search_messages", "c2", query="sailing"),
        call("temporal_search", "c3", query="sailing", after="2000-01-01"),
        call("messages_by_date_range", "c4", after="2000-01-01T00:00:00Z", limit=50),
    ]
    mine = {"observer_id": "bob", "target_id": "bob", "query": "What does Bob like?"}
    for perspective in ("", "alice"):
        model_server.script([Reply(tool_calls=tools), Reply(content="Bob keeps bees")])
        await ask(memory["chan"], reasoning_level=d.REASONING_LEVEL_HIGH, perspective_peer_id=perspective, **mine)
        results = tool_messages(model_server.chat_requests()[-1])
        assert ("I love sailing" in results[0]) == (perspective == "")  # bob's own view holds it
    assert not any("sailing" in r.lower() for r in results)
    assert "I moved to Oslo last year" in results[3]  # what alice was there for is still read
    await rejected(ask(memory["chan"], perspective_peer_id="ghost", **mine), grpc.StatusCode.NOT_FOUND, "ghost")


# 54 KB, under the 64 KB limit, and 10,500 tokens
BIG_SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {f"f{i}": {"type": "string", "description": "alpha beta gamma delta " * 6} for i in range(300)},
    },
    separators=(",", ":"),
)


@pytest.mark.parametrize(
    "kw,code,phrase",
    [
        ({"query": "  "}, grpc.StatusCode.INVALID_ARGUMENT, "query is empty"),
        ({"query": "x" * 10_001}, grpc.StatusCode.INVALID_ARGUMENT, "the limit is 10000"),
        ({"target_id": "ghost"}, grpc.StatusCode.NOT_FOUND, "ghost"),
        ({"session_id": "nope"}, grpc.StatusCode.NOT_FOUND, "nope"),
        ({"reasoning_level": 9}, grpc.StatusCode.INVALID_ARGUMENT, "reasoning_level"),
        ({"response_format": d.ResponseFormat(json_schema="{not json")}, grpc.StatusCode.INVALID_ARGUMENT, "not JSON"),
        (
            {"response_format": d.ResponseFormat(json_schema='{"type": 5}')},
            grpc.StatusCode.INVALID_ARGUMENT,
            "not a valid JSON schema",
        ),
        ({"query": "where\x00"}, grpc.StatusCode.INVALID_ARGUMENT, "NUL"),
        # within 10,000 characters, 18,000 tokens: sent whole to the model, twice with a repair
        (
            {"query": "\U0001f642" * 9_000},
            grpc.StatusCode.INVALID_ARGUMENT,
            "take 18,000 tokens together; at most 8,000",
        ),
        (
            {"response_format": d.ResponseFormat(json_schema=BIG_SCHEMA)},
            grpc.StatusCode.INVALID_ARGUMENT,
            "tokens together",
        ),
        ({"time_zone": "Mars/Olympus_Mons"}, grpc.StatusCode.INVALID_ARGUMENT, "IANA name"),
    ],
)
async def test_bad_input_is_refused_before_any_model_call(memory, model_server, kw, code, phrase):
    await rejected(ask(memory["chan"], **kw), code, phrase)
    await rejected(anext(aiter(stream(memory["chan"], **kw))), code, phrase)
    assert model_server.chat_requests() == []


async def test_a_model_that_is_down_is_a_clear_unavailable_error(memory, model_server):
    model_server.reply_with(lambda req: Reply(status=503))
    await rejected(ask(memory["chan"]), grpc.StatusCode.UNAVAILABLE, "dialectic_low", "model unavailable")
    await rejected(anext(aiter(stream(memory["chan"]))), grpc.StatusCode.UNAVAILABLE, "model unavailable")


async def read_all(call) -> list:
    return [chunk async for chunk in call]


async def test_a_model_stream_cut_off_mid_answer_is_unavailable_not_a_shorter_answer(memory, model_server):
    # no finish_reason, then the end of a connection-delimited body: "Bob does not" was the whole answer, OK
    words = [[{"index": 0, "delta": {"content": word}}] for word in ("Bob ", "does ", "not")]
    model_server.reply_with(lambda req: Reply(chunks=words))
    await rejected(read_all(stream(memory["chan"])), grpc.StatusCode.UNAVAILABLE, "dialectic_low", "model unavailable")


async def test_a_model_answer_past_max_tokens_is_internal_not_the_callers_message_size(memory, model_server):
    # a server ignoring max_tokens: its 5.2 MB answer was RESOURCE_EXHAUSTED "Received message larger than max"
    model_server.reply_with(lambda req: Reply(content="Oslo" * 1_300_000))
    phrases = ("dialectic_low", "longer than max_tokens (1024) allows")
    await rejected(ask(memory["chan"]), grpc.StatusCode.INTERNAL, *phrases)
    await rejected(read_all(stream(memory["chan"])), grpc.StatusCode.INTERNAL, *phrases)


# what a provider answers an operator's bad key with: part of the key and the organisation
PROVIDER_REFUSAL = {"error": {"message": "Incorrect API key provided: sk-proj-AbCd****wXyZ (org-Q1w2E3r4)"}}


async def test_a_model_server_refusal_reaches_the_caller_without_the_servers_reply(memory, model_server):
    model_server.reply_with(lambda req: Reply(status=401, error_body=PROVIDER_REFUSAL))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await ask(memory["chan"])
    details = refused.value.details()
    assert refused.value.code() == grpc.StatusCode.INTERNAL and "dialectic_low" in details and "HTTP 401" in details
    assert "sk-proj" not in details and "org-" not in details and "Incorrect API key" not in details


async def test_a_model_slower_than_the_deadline_is_deadline_exceeded(serve, memory, model_server):
    chan = await serve(PEERLOG_DIALECTIC_DEADLINE_S="1")
    model_server.reply_with(lambda req: Reply(content="late", delay_s=3))
    await rejected(ask(chan), grpc.StatusCode.DEADLINE_EXCEEDED, "did not finish within 1.0 s")


async def test_a_workspace_past_its_running_chats_is_resource_exhausted_while_another_workspace_still_chats(
    serve, memory, model_server
):
    # before: no bound, so one tenant's calls could take every model call the server's account allows
    chan = await serve(api={"chats_per_workspace": 1})
    await Client(chan).setup_conversation("w2", "s", peers=("alice", "bob"))
    model_server.reply_with(lambda req: Reply(content="Oslo", delay_s=3))
    held = asyncio.ensure_future(ask(chan))
    await until_true(model_server.chat_requests)  # its model call is under way
    await rejected(ask(chan), grpc.StatusCode.RESOURCE_EXHAUSTED, "'w' already has 1 Chat", "CHATS_PER_WORKSPACE")
    await rejected(
        _streamed(stream(chan)), grpc.StatusCode.RESOURCE_EXHAUSTED, "'w' already has 1 Chat", "CHATS_PER_WORKSPACE"
    )
    assert not held.done()  # the refusals came while it held its place
    assert (await ask(chan, workspace_id="w2")).answer  # another workspace is not held up (it knows nothing)
    assert (await held).answer == "Oslo"
    assert (await ask(chan)).answer == "Oslo"  # the finished call gave its place back


async def _streamed(call) -> list:
    return [chunk async for chunk in call]


async def test_a_token_budget_too_small_for_a_tool_round_makes_the_model_answer_without_tools(
    serve, memory, model_server
):
    chan = await serve(PEERLOG_DIALECTIC_TOKEN_BUDGET="1000")
    model_server.reply_with(lambda req: Reply(content="Oslo", tool_calls=[call("search_observations", query="x")]))
    out = await ask(chan)
    requests = model_server.chat_requests()
    assert out.tool_rounds == 0 and out.answer == "Oslo" and all("tools" not in r for r in requests)
    assert "no room for more tool results" in requests[-1]["messages"][-1]["content"]


async def test_reasoning_chain_follows_a_derived_belief_to_its_explicit_premises(settings, memory, model_server):
    from services.bus.producer import EventLog
    from services.events import Level, ObservationAdded, ProducerInfo

    premise = memory["obs"][1]
    derived = ObservationAdded(
        workspace_id="w",
        observer_id="alice",
        observed_id="bob",
        observation_id="derived-1",
        level=Level.DEDUCTIVE,
        content="Bob lives in Norway",
        premise_ids=(premise,),
        producer=ProducerInfo(component="test-dreamer", version="0"),
    )
    log = EventLog(settings.kafka)
    log.start()
    try:
        token = (await log.append([derived])).encode()
    finally:
        log.close()
    await Client(memory["chan"]).all_observations("w", "alice", "bob", token)
    model_server.script(
        [
            Reply(
                tool_calls=[
                    call("reasoning_chain", "c1", observation_id="derived-1"),
                    call("reasoning_chain", "c2", observation_id=premise),
                    call("source_messages", "c3", observation_id=premise),
                ]
            )
        ]
    )
    model_server.reply_with(
        lambda req: Reply(content=f"Norway, since he lives in Oslo [obs:{premise}] [msg:{memory['oslo']}]")
    )

    out = await ask(memory["chan"], query="Which country does Bob live in?", consistency={"consistency_token": token})

    chain, back, sources = tool_messages(model_server.chat_requests()[1])
    assert chain.index("Bob lives in Norway") < chain.index("Premises:\n[obs:" + premise) < chain.index("Concluded")
    assert "Concluded from it:\n[obs:derived-1]" in back
    assert "span: 'moved to Oslo'" in sources
    assert list(out.cited_observation_ids) == [premise] and list(out.cited_message_ids) == [memory["oslo"]]


async def test_structured_mode_answers_a_string_schema_and_accepts_a_repair_in_its_own_wrapper(
    serve, memory, model_server
):
    chan = await serve(
        PEERLOG_LLM_DIALECTIC_LOW_TOOL_MODE="structured", PEERLOG_LLM_DIALECTIC_LOW_SCHEMA_MODE="json_object"
    )
    model_server.script([Reply(content={"answer": "Oslo", "cited_ids": []})])
    out = await ask(chan, response_format=d.ResponseFormat(json_schema=json.dumps({"type": "string"})))
    assert json.loads(out.answer) == "Oslo" and len(model_server.chat_requests()) == 1  # no repair needed

    # the repair turn is plain text, and the model keeps to structured mode's {"answer", "cited_ids"}
    model_server.script(
        [Reply(content={"answer": {"town": "Oslo"}}), Reply(content='{"answer": {"city": "Oslo"}, "cited_ids": []}')]
    )
    out = await ask(chan, response_format=d.ResponseFormat(json_schema=json.dumps(SCHEMA)))
    assert json.loads(out.answer) == {"city": "Oslo"}


async def test_structured_mode_garbage_after_the_repair_is_a_clear_error(serve, memory, model_server):
    chan = await serve(
        PEERLOG_LLM_DIALECTIC_LOW_TOOL_MODE="structured", PEERLOG_LLM_DIALECTIC_LOW_SCHEMA_MODE="json_object"
    )
    model_server.script([Reply(content="Bob lives in Oslo."), Reply(content={"neither": "tool nor answer"})])
    await rejected(ask(chan), grpc.StatusCode.INTERNAL, "dialectic_low", "model output invalid")
    assert len(model_server.chat_requests()) == 2


async def test_streamed_thinking_before_a_tool_call_is_marked_for_discarding(memory, model_server):
    model_server.script([Reply(content="Let me check", tool_calls=[call("grep_messages", pattern="Oslo")])])
    model_server.reply_with(lambda req: Reply(content="He lives in Oslo"))

    chunks = [chunk async for chunk in stream(memory["chan"])]

    kinds = [chunk.WhichOneof("event") for chunk in chunks]
    assert kinds == ["text"] * 3 + ["discard_text", "tool"] + ["text"] * 4 + ["done"]
    assert "".join(chunk.text for chunk in chunks[:3]) == "Let me check"
    assert "".join(chunk.text for chunk in chunks[5:-1]) == chunks[-1].done.answer == "He lives in Oslo"


async def test_a_streamed_answer_corrected_afterwards_is_withdrawn_and_resent(memory, model_server):
    model_server.script([Reply(content="Oslo [obs:invented]")])
    chunks = [chunk async for chunk in stream(memory["chan"])]
    kinds = [chunk.WhichOneof("event") for chunk in chunks]
    assert kinds == ["text", "text", "discard_text", "text", "done"]
    assert chunks[3].text == chunks[-1].done.answer == "Oslo"


def schema_object(value: dict) -> d.ResponseFormat:
    fmt = d.ResponseFormat()
    fmt.json_schema_object.update(value)
    return fmt


def nested(depth: int) -> str:
    return '{"not": ' * depth + "{}" + "}" * depth


@pytest.mark.parametrize(
    "fmt,phrase",
    [
        (d.ResponseFormat(json_schema=json.dumps({"$ref": "http://127.0.0.1:9/schema.json"})), "only references into"),
        (d.ResponseFormat(json_schema=json.dumps({"$ref": "file:///etc/hostname"})), "only references into"),
        (schema_object({"properties": {"a": {"$ref": "file:///etc/hostname"}}}), "only references into"),
        (d.ResponseFormat(json_schema='{"$ref": "#"}'), "only references into"),
        (d.ResponseFormat(json_schema=nested(3_000)), "nested more than 32 deep"),
        (schema_object({"type": "number", "minimum": float("nan")}), "NaN or Infinity"),
        (d.ResponseFormat(json_schema='{"type": "number", "minimum": NaN}'), "not a JSON number"),
        (d.ResponseFormat(json_schema=json.dumps({"description": "x" * 70_000})), "the limit is 65536"),
        (
            d.ResponseFormat(
                json_schema=json.dumps(
                    {"$schema": "http://json-schema.org/draft-04/schema#", "enum": [{"a": i} for i in range(3_000)]}
                )
            ),
            "too many objects",
        ),
        (
            d.ResponseFormat(
                json_schema=json.dumps({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"})
            ),
            "cycle",
        ),
    ],
)
async def test_a_hostile_response_format_is_invalid_argument_before_any_model_call(memory, model_server, fmt, phrase):
    await rejected(ask(memory["chan"], response_format=fmt), grpc.StatusCode.INVALID_ARGUMENT, phrase)
    await rejected(anext(aiter(stream(memory["chan"], response_format=fmt))), grpc.StatusCode.INVALID_ARGUMENT, phrase)
    assert model_server.chat_requests() == []


async def test_a_local_ref_in_the_response_format_is_followed_without_fetching(memory, model_server):
    schema = {
        "type": "object",
        "required": ["city"],
        "properties": {"city": {"$ref": "#/$defs/name"}},
        "$defs": {"name": {"type": "string"}},
    }
    model_server.reply_with(lambda req: Reply(content='{"city": "Oslo"}'))
    out = await ask(memory["chan"], response_format=d.ResponseFormat(json_schema=json.dumps(schema)))
    assert json.loads(out.answer) == {"city": "Oslo"}


def day(n: int) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(datetime(2026, 1, n, tzinfo=UTC))
    return out


@pytest.fixture
async def diary(serve, settings, start_worker):
    """Embedded turns with their own days. alice and bob in s: a dog on day 1, a puppy on day 13 (named by
    no word of the question below), filler between, a dog again on day 20; bob and carol in s2: a dog on
    day 12, which alice never saw."""
    start_worker("embedder")
    chan = await serve()
    c = Client(chan)
    await c.setup_conversation("w", "s", peers=("alice", "bob", "carol"))
    await c.session("w", "s2", members=("bob", "carol"))

    def turn(peer: str, text: str, n: int) -> messages_pb2.NewMessage:
        return messages_pb2.NewMessage(peer_id=peer, content=text, created_at=day(n))

    await c.add(
        "w",
        "s",
        [
            turn("bob", "My old dog Max loved chasing the ball in the park", 1),
            turn("alice", "Ha, I remember him", 2),
            turn("alice", "The printer jammed again", 10),
            turn("bob", "Taxes are due soon", 11),
            turn("alice", "We cooked lentil soup", 12),
            turn("bob", "We adopted a puppy last weekend, she sleeps all day", 13),
            turn("alice", "The dog bit the mailman", 20),
        ],
    )
    await c.add("w", "s2", [turn("bob", "I got a new dog for my kids", 12)])
    eventually(lambda: embedded_count(settings) == 8, 90)
    return chan, c


def shown(result: str) -> list[str]:
    return re.findall(r"\[msg:([^\]]+)\]", result)


async def search_api(c: Client, **kw) -> list[str]:
    out = await c.workspaces.SearchMessages(
        workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="w", perspective_peer_id="alice", **kw)
    )
    return [r.message.message_id for r in out.results]


async def test_temporal_search_finds_by_meaning_inside_the_window_only_what_the_observer_saw(diary, model_server):
    chan, c = diary
    question = "a new pet dog"
    window = {"after": "2026-01-05", "before": "2026-01-15T00:00:00Z"}
    model_server.script(
        [
            Reply(
                tool_calls=[
                    call("temporal_search", "c1", query=question, limit=50, **window),
                    call("temporal_search", "c2", query=question, limit=1, **window),
                    call("search_messages", "c3", query=question, limit=50),
                    call("messages_by_date_range", "c4", after="2026-01-10T00:00:00Z", before="2026-01-13T00:00:00Z"),
                    call("temporal_search", "c5", query=question, after="2026-01-15", before="2026-01-05"),
                ]
            )
        ]
    )
    model_server.reply_with(lambda req: Reply(content="Bob adopted a puppy"))

    await ask(chan, query="Which pet did Bob get in January?")

    in_window, best, anywhere, listed, backwards = tool_messages(model_server.chat_requests()[1])
    assert "puppy" in best and "[msg:" in best
    for text in ("puppy", "printer", "Taxes", "lentil"):
        assert text in in_window
    # a better match by words outside the window, and one inside it that alice never saw, are left out
    for text in ("Max", "mailman", "new dog"):
        assert text not in in_window
    assert "Max" in anywhere and "mailman" in anywhere and "new dog" not in anywhere
    # the listing's window is the search's: [after, before)
    assert [line.split(": ", 1)[1] for line in listed.splitlines()] == [
        "The printer jammed again",
        "Taxes are due soon",
        "We cooked lentil soup",
    ]
    assert "after must be earlier than before" in backwards

    # Chat finds what search finds: the same messages in the same order as SearchMessages from alice's view,
    # re-ranked as Chat's tools are by default (PEERLOG_RERANK_CHAT)
    limit = DialecticSettings().tool_result_limit
    window_search = {"after": day(5), "before": day(15)}
    assert shown(in_window) == await search_api(c, query=question, limit=limit, rerank=True, **window_search)
    assert shown(anywhere) == await search_api(c, query=question, limit=limit, rerank=True)
