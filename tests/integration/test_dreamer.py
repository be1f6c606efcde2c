"""The dreamer, running as a worker against the HTTP test model: specialists' tool loops, enforced premises,
knowledge updates, graded patterns, the round cap, a failing model, and a rebuild that needs no model."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from datetime import UTC, datetime

from peerlog.v1 import audit_pb2, dreams_pb2, peers_pb2
from projections.rebuild import rebuild
from services.cli.client import Client
from services.dreamer.prompt import PROMPT_VERSIONS
from tests.support.model_server import Reply
from tests.support.wait import until, until_true

FACTS = [
    "Bob lives in Oslo",
    "Bob moved to Bergen last month",
    "Bob keeps bees",
    "Bob goes to the market every Saturday",
]


def call(name: str, **arguments) -> dict:
    return {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def specialist(request: dict) -> str:
    system = request["messages"][0]["content"]
    return "deduction" if "Your job is deduction" in system else "induction"


def rounds_done(request: dict) -> int:
    return sum(1 for m in request["messages"] if m["role"] == "assistant")


def scripted(ids: list[str]):
    oslo, bergen, bees, market = ids
    plan = {
        "deduction": [
            call("search_observations", query="where does bob live"),
            call(
                "update_knowledge",
                outdated_id=oslo,
                content="Bob lives in Bergen",
                premise_ids=[bergen],
                reason="he moved",
            ),
            call("add_deduction", content="Bob is happy", premise_ids=[]),
            call("set_peer_card", entries=["ATTRIBUTE: lives in Bergen", "ATTRIBUTE: keeps bees"]),
        ],
        "induction": [
            call("add_pattern", content="Bob keeps routines", pattern_type="tendency", premise_ids=[bees]),
            # a copy of a belief the store holds, which it does not cite
            call(
                "add_pattern",
                content="bob goes to the market  every Saturday",
                pattern_type="tendency",
                premise_ids=[bees, bergen],
            ),
            call(
                "add_pattern",
                content="Bob spends his free time on steady outdoor routines",
                pattern_type="behaviour",
                premise_ids=[bees, market],
            ),
        ],
    }

    def reply(request: dict) -> Reply:
        steps, n = plan[specialist(request)], rounds_done(request)
        return Reply(tool_calls=[steps[n]]) if n < len(steps) else Reply(content="No more supported edits.")

    return reply


async def seed(c: Client) -> list[str]:
    await c.setup_conversation("w", "s")
    made = await c.create_observations("w", "bob", "bob", FACTS)
    return list(made.observation_ids)


async def projected_edit(c: Client, content: str):
    """Bob's observation saying `content`, once projected: a dream's edits are on the observations topic,
    projected apart from its end (the dreams topic), so a dream can read as ended before they do."""
    listed = await until(lambda: c.all_observations("w", "bob", "bob"), lambda got: content in {o.content for o in got})
    return next(o for o in listed if o.content == content)


async def dream_once(c: Client, settings, state: str = "completed", timeout: float = 90) -> dreams_pb2.Dream:
    await c.dreams.ScheduleDream(dreams_pb2.ScheduleDreamRequest(workspace_id="w", observer_id="bob"))

    async def ended():
        for _ in range(int(timeout * 5)):
            got = await c.dreams.ListDreams(dreams_pb2.ListDreamsRequest(workspace_id="w", observer_id="bob"))
            if got.dreams and got.dreams[0].state in ("completed", "failed"):
                return got.dreams[0]
            await asyncio.sleep(0.2)
        raise AssertionError("the dream did not end in time")

    dream = await ended()
    assert dream.state == state, dream.error
    return dream


async def test_a_dream_updates_knowledge_records_refusals_and_grades_a_pattern(
    channel, settings, model_server, start_worker
):
    c = Client(channel)
    ids = await seed(c)
    oslo, bergen, bees, market = ids
    model_server.reply_with(scripted(ids))
    start_worker("dream-scheduler,dreamer")
    dream = await dream_once(c, settings)
    assert dream.edits == 3 and dream.reason == "forced"
    assert (await c.processing_status("w", observer_id="bob")).dreams.completed == 1

    # its last edit, behind which the pair's partition holds all the others
    await projected_edit(c, "Bob spends his free time on steady outdoor routines")
    live = {o.content: o for o in await c.all_observations("w", "bob", "bob")}
    assert "Bob lives in Oslo" not in live
    update, pattern = live["Bob lives in Bergen"], live["Bob spends his free time on steady outdoor routines"]
    assert list(update.premise_ids) == [bergen] and update.dream_id == dream.dream_id
    assert (pattern.confidence, pattern.pattern_type, list(pattern.premise_ids)) == ("low", "behaviour", [bees, market])

    history = await c.audit.GetObservationHistory(
        audit_pb2.GetObservationHistoryRequest(workspace_id="w", observation_id=oslo)
    )
    superseded = [e for e in history.entries if e.kind == "superseded"]
    assert dict(superseded[0].detail)["by"] == update.observation_id
    assert superseded[0].producer.prompt_version == PROMPT_VERSIONS["deduction"]

    refused = await c.audit.ListRejectedObservations(
        audit_pb2.ListRejectedObservationsRequest(workspace_id="w", dream_id=dream.dream_id)
    )
    assert sorted(r.content for r in refused.rejections) == [
        "Bob is happy",
        "Bob keeps routines",
        "bob goes to the market  every Saturday",
    ]
    copy = next(r for r in refused.rejections if r.content.startswith("bob goes"))
    assert f"observation {market} already says that" in copy.reason
    card = await c.peers.GetPeerCard(peers_pb2.GetPeerCardRequest(workspace_id="w", observer_id="bob"))
    assert list(card.entries) == ["ATTRIBUTE: lives in Bergen", "ATTRIBUTE: keeps bees"]

    # the specialist was told why: the refusal is the tool result of its next request
    after_refusal = [r for r in model_server.chat_requests() if specialist(r) == "deduction" and rounds_done(r) == 3]
    assert "rejected: a deductive observation must cite at least 1" in after_refusal[0]["messages"][-1]["content"]
    offered = {
        specialist(r): sorted(t["function"]["name"] for t in r["tools"])
        for r in model_server.chat_requests()
        if r.get("tools")
    }
    assert "add_pattern" in offered["induction"] and "update_knowledge" not in offered["induction"]
    assert "set_peer_card" in offered["deduction"] and "add_pattern" not in offered["deduction"]


async def test_a_dreams_edits_are_dated_when_the_dream_writes_them_not_when_its_specialist_made_them(
    channel, settings, model_server, start_worker
):
    # the edits reach the log together at the dream's end: dated earlier, a read as of a time between showed
    # the store without them then and with them once written, and a page cursor already past that time
    # never listed them
    c = Client(channel)
    ids = await seed(c)
    plan, last_asked = scripted(ids), []

    def slow_last(request: dict) -> Reply:
        reply = plan(request)
        if specialist(request) == "induction" and reply.tool_calls is None:  # the dream's last model call
            last_asked.append(datetime.now(UTC))
            return dataclasses.replace(reply, delay_s=2.0)
        return reply

    model_server.reply_with(slow_last)
    start_worker("dream-scheduler,dreamer")
    await dream_once(c, settings)
    update = await projected_edit(c, "Bob lives in Bergen")
    assert update.created_at.ToDatetime(tzinfo=UTC) > last_asked[-1]  # made in the first round, written last


async def test_a_card_a_client_sets_while_the_dream_runs_is_not_overwritten_by_the_dreams_card(
    channel, settings, model_server, start_worker
):
    c = Client(channel)
    ids = await seed(c)
    plan, asked_last = scripted(ids), threading.Event()

    def slow_last(request: dict) -> Reply:
        reply = plan(request)
        if specialist(request) == "induction" and reply.tool_calls is None:  # after the dream's card edit
            asked_last.set()
            return dataclasses.replace(reply, delay_s=8.0)  # room for the client's card to be readable
        return reply

    model_server.reply_with(slow_last)
    start_worker("dream-scheduler,dreamer", PEERLOG_LLM_TIMEOUT_S="30")  # the delayed call is no timeout
    await c.dreams.ScheduleDream(dreams_pb2.ScheduleDreamRequest(workspace_id="w", observer_id="bob"))
    await until_true(asked_last.is_set, timeout=90)
    mine = ["IDENTITY: Robert", "INSTRUCTION: call him Rob"]
    await c.peers.SetPeerCard(peers_pb2.SetPeerCardRequest(workspace_id="w", observer_id="bob", entries=mine))
    dream = await dream_once(c, settings)
    await projected_edit(c, "Bob lives in Bergen")  # the dream's other edits stand
    card = await c.peers.GetPeerCard(peers_pb2.GetPeerCardRequest(workspace_id="w", observer_id="bob"))
    # written at the dream's end from the card it read before, it replaced the client's
    assert list(card.entries) == mine and dream.state == "completed"


async def test_a_rebuild_reproduces_the_dream_exactly_without_calling_a_model(
    channel, settings, model_server, start_worker
):
    c = Client(channel)
    model_server.reply_with(scripted(await seed(c)))
    worker = start_worker("dream-scheduler,dreamer")
    await dream_once(c, settings)
    worker.stop()
    calls = len(model_server.chat_requests())
    report = await asyncio.get_running_loop().run_in_executor(None, lambda: rebuild(settings, progress=lambda _: None))
    assert report.switched and set(report.differences.values()) == {0}, report.differences
    assert len(model_server.chat_requests()) == calls


async def test_a_specialist_that_never_stops_is_cut_off_at_its_round_cap(channel, settings, model_server, start_worker):
    c = Client(channel)
    await seed(c)
    model_server.reply_with(lambda r: Reply(tool_calls=[call("recent_observations", limit=5)]))
    start_worker("dream-scheduler,dreamer", PEERLOG_DREAM_DEDUCTION_ROUNDS="3", PEERLOG_DREAM_INDUCTION_ROUNDS="2")
    dream = await dream_once(c, settings)
    per = {s: [r for r in model_server.chat_requests() if specialist(r) == s] for s in ("deduction", "induction")}
    assert (len(per["deduction"]), len(per["induction"])) == (4, 3)  # the cap, then one last turn without tools
    assert (
        "tools" not in per["deduction"][-1]
        and "used all your tool rounds" in per["deduction"][-1]["messages"][-1]["content"]
    )
    assert dream.edits == 0


async def test_a_model_that_fails_ends_the_dream_as_failed_with_the_reason(
    channel, settings, model_server, start_worker
):
    c = Client(channel)
    await seed(c)
    model_server.reply_with(lambda r: Reply(status=500))
    start_worker("dream-scheduler,dreamer")
    dream = await dream_once(c, settings, state="failed")
    assert dream.error and "deduction" in dream.error and dream.edits == 0
    status = await c.processing_status("w", observer_id="bob")
    assert (status.dreams.failed, status.dreams.completed, status.dreams.requested) == (1, 0, 0)


async def test_a_model_without_tool_calling_dreams_through_structured_output_citing_short_names(
    channel, settings, model_server, start_worker
):
    c = Client(channel)
    oslo, bergen, bees, market = await seed(c)

    def reply(request: dict) -> Reply:
        if specialist(request) == "deduction" and rounds_done(request) == 0:
            # the opening names observations #1, #2, … (oldest first): #1 is Oslo
            return Reply(
                content={
                    "tool": "add_deduction",
                    "arguments": {"content": "Bob lives in Norway", "premise_ids": ["#1"]},
                }
            )
        return Reply(content={"done": "No more supported edits."})

    model_server.reply_with(reply)
    start_worker("dream-scheduler,dreamer", PEERLOG_LLM_TOOL_MODE="structured", PEERLOG_LLM_SCHEMA_MODE="json_object")
    dream = await dream_once(c, settings)
    assert dream.edits == 1
    first = model_server.chat_requests()[0]
    assert "tools" not in first and '"tool": "<name>"' in first["messages"][0]["content"]
    assert "[obs:#1] (explicit" in first["messages"][1]["content"] and oslo not in first["messages"][1]["content"]
    norway = await projected_edit(c, "Bob lives in Norway")
    assert list(norway.premise_ids) == [oslo] and norway.dream_id == dream.dream_id


async def test_a_dream_that_fails_after_an_edit_counts_the_edit_that_stands(
    channel, settings, model_server, start_worker
):
    c = Client(channel)
    ids = await seed(c)

    def edit_then_fail(request: dict) -> Reply:
        if rounds_done(request) == 0:
            return Reply(tool_calls=[call("add_deduction", content="Bob lives in Norway", premise_ids=[ids[0]])])
        return Reply(status=500)

    model_server.reply_with(edit_then_fail)
    start_worker("dream-scheduler,dreamer")
    dream = await dream_once(c, settings, state="failed")
    await projected_edit(c, "Bob lives in Norway")
    assert dream.edits == 1  # DreamFailed had no count: ListDreams said 0 of a store it had changed


async def test_a_dream_that_outlasts_its_time_budget_ends_as_failed_within_it(
    channel, settings, model_server, start_worker
):
    c = Client(channel)
    await seed(c)
    # a slow model that keeps asking for tools: 12 rounds of 0.8 s would take ~10 s
    model_server.reply_with(lambda r: Reply(tool_calls=[call("recent_observations", limit=5)], delay_s=0.8))
    start_worker("dream-scheduler,dreamer", PEERLOG_DREAM_MAX_DREAM_S="2.5")
    dream = await dream_once(c, settings, state="failed")
    assert "time budget of 2.5 s" in dream.error
    assert len(model_server.chat_requests()) <= 5  # cut off, not run to its round cap
