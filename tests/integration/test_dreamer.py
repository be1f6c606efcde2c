"""The dreamer, running as a worker against the HTTP test model: specialists' tool loops, enforced premises,
knowledge updates, graded patterns, the round cap, a failing model, a rebuild that needs no model, what a
dream may read (only what its pair perceived) and what it may not write again (what a client deleted)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from datetime import UTC, datetime

from peerlog.v1 import audit_pb2, dreams_pb2, messages_pb2, observations_pb2, peers_pb2
from peerlog.v1 import configuration_pb2 as cfg
from projections.rebuild import rebuild
from projections.schema import perceptions
from services.cli.client import Client
from services.dreamer.prompt import PROMPT_VERSIONS
from tests.integration.test_deriver import rows
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


FORCE = dreams_pb2.ScheduleDreamRequest(workspace_id="w", observer_id="bob")


async def listed_dreams(c: Client) -> list[dreams_pb2.Dream]:
    """Bob's dreams, newest first."""
    return list((await c.dreams.ListDreams(dreams_pb2.ListDreamsRequest(workspace_id="w", observer_id="bob"))).dreams)


async def ended(c: Client, state: str, timeout: float) -> dreams_pb2.Dream:
    for _ in range(int(timeout * 5)):
        got = await listed_dreams(c)
        if got and got[0].state in ("completed", "failed"):
            assert got[0].state == state, got[0].error
            return got[0]
        await asyncio.sleep(0.2)
    raise AssertionError("the dream did not end in time")


async def dream_once(c: Client, settings, state: str = "completed", timeout: float = 90) -> dreams_pb2.Dream:
    await c.dreams.ScheduleDream(FORCE)
    return await ended(c, state, timeout)


async def dream_after(c: Client, last: dreams_pb2.Dream, timeout: float = 90) -> dreams_pb2.Dream:
    """The pair's next dream, forced, once ended: until the scheduler has taken `last`'s end, a forced dream
    is folded into it (one is outstanding per pair at most), so it is asked for until a new one is listed."""

    async def asked() -> list[dreams_pb2.Dream]:
        await c.dreams.ScheduleDream(FORCE)
        return await listed_dreams(c)

    await until(asked, lambda got: got[0].dream_id != last.dream_id)
    return await ended(c, "completed", timeout)


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


def tool_results(model_server, of: str = "deduction") -> list[str]:
    """What the specialist `of` was shown by its tools in the latest dream, in order (its last request
    carries every result of the conversation)."""
    last = [r for r in model_server.chat_requests() if specialist(r) == of][-1]
    return [m["content"] for m in last["messages"] if m["role"] == "tool"]


async def test_a_message_sent_with_reasoning_off_is_never_shown_to_a_dream_nor_written_to_its_card(
    channel, settings, model_server, start_worker
):
    # a dream read every message the observer saw: one sent with reasoning off ("never perceived") was found
    # by its message search and written to the peer card
    c = Client(channel)
    await c.setup_conversation("w", "s")
    added = await c.add(
        "w",
        "s",
        [
            messages_pb2.NewMessage(
                peer_id="bob",
                content="my card number is 4111 1111 1111 1111",
                configuration=cfg.Configuration(reasoning=False),
            ),
            messages_pb2.NewMessage(peer_id="bob", content="I keep my card number in the kitchen drawer"),
        ],
    )
    secret, drawer = added.message_ids
    # a client's observation may cite any message the observer saw, the unperceived one too
    sourced = observations_pb2.NewObservation(
        content="Bob keeps his card in the kitchen drawer",
        sources=[
            observations_pb2.ObservationSource(message_id=secret, span="4111 1111 1111 1111"),
            observations_pb2.ObservationSource(message_id=drawer, span="kitchen drawer"),
        ],
    )
    (noted,) = (await c.create_observations("w", "bob", "bob", [sourced], added.consistency_token)).observation_ids

    def reply(request: dict) -> Reply:
        # the model writes to the card what its tools showed it
        steps = [
            call("search_messages", query="card number"),
            call("source_messages", observation_id=noted),
        ]
        n = rounds_done(request)
        if specialist(request) != "deduction" or n > len(steps):
            return Reply(content="No more supported edits.")
        if n < len(steps):
            return Reply(tool_calls=[steps[n]])
        shown = " ".join(m["content"] for m in request["messages"] if m["role"] == "tool")
        entry = "ATTRIBUTE: card number 4111 1111 1111 1111" if "4111" in shown else "ATTRIBUTE: card in a drawer"
        return Reply(tool_calls=[call("set_peer_card", entries=[entry])])

    model_server.reply_with(reply)
    start_worker("router,dream-scheduler,dreamer")
    # the dream starts once the router's perception of the second message is readable: the first has none
    perceived = await until(
        lambda: asyncio.to_thread(rows, settings, perceptions, perceptions.c.observer_id == "bob"), lambda got: got
    )
    assert [p["message_id"] for p in perceived] == [drawer]
    await dream_once(c, settings)

    search, sources, _card = tool_results(model_server)
    assert "kitchen drawer" in search and "4111" not in search
    assert drawer in sources and "4111" not in sources
    card = await c.peers.GetPeerCard(peers_pb2.GetPeerCardRequest(workspace_id="w", observer_id="bob"))
    assert list(card.entries) == ["ATTRIBUTE: card in a drawer"]


async def test_a_dream_does_not_rewrite_a_conclusion_deleted_from_the_same_premises(
    channel, settings, model_server, start_worker
):
    # the next dream wrote a deleted deduction again from the same premises: deleting one never stuck
    c = Client(channel)
    oslo, bergen, bees, market = await seed(c)
    model_server.reply_with(
        lambda r: (
            Reply(tool_calls=[call("add_deduction", content="Bob lives in Norway", premise_ids=[oslo])])
            if specialist(r) == "deduction" and rounds_done(r) == 0
            else Reply(content="No more supported edits.")
        )
    )
    start_worker("dream-scheduler,dreamer")
    first = await dream_once(c, settings)
    norway = await projected_edit(c, "Bob lives in Norway")
    await c.delete_observation("w", norway.observation_id, reason="wrong: Bob never said that")
    await until(
        lambda: c.all_observations("w", "bob", "bob"),
        lambda got: "Bob lives in Norway" not in {o.content for o in got},
    )

    second = await dream_after(c, first)
    assert second.edits == 0
    why = f"observation {norway.observation_id} said that and was deleted"
    assert why in tool_results(model_server)[-1]  # the specialist is told
    refused = await until(
        lambda: c.audit.ListRejectedObservations(
            audit_pb2.ListRejectedObservationsRequest(workspace_id="w", dream_id=second.dream_id)
        ),
        lambda got: got.rejections,
    )
    assert [(r.content, list(r.premise_ids)) for r in refused.rejections] == [("Bob lives in Norway", [oslo])]
    assert why in refused.rejections[0].reason
    live = await c.all_observations("w", "bob", "bob")
    assert "Bob lives in Norway" not in {o.content for o in live}
