"""`peerlog derivations promote` makes a named derivation the current one, rewriting nothing."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from peerlog.v1 import context_pb2, context_pb2_grpc, observations_pb2
from projections.rebuild import rebuild
from services.bus.topics import PERCEIVED
from services.cli.client import Client
from services.cli.derivations import comparison
from services.dreamer.edits import Dream, DreamWrites, NamedObservation, UpdateKnowledge, decide_edit
from services.events import PAIR_WIDE, MessagePerceived, ProducerInfo, encode
from services.events.base import new_id
from services.rederivation.promote import promote
from services.rederivation.rederive import DerivationScope, finished, rederive
from services.rederivation.rederive import perceived as perceived_log
from tests.integration.test_derivation_runs_under_faults import FACT, FIRST, perceived, settings_for
from tests.integration.test_rederive import current_rows
from tests.integration.test_unconfirmed_commits import open_transaction
from tests.support.extractor import extract_each_turn, with_fact
from tests.support.model_server import Reply
from tests.support.observations import append
from tests.support.wait import eventually, until

V2_MODEL = "other-model"
v2_facts = with_fact(lambda text: f"v2: {text.lower()}")
DREAMER = ProducerInfo(component="dreamer", version="0", model="test-model", prompt_version="deduction-v1")
FILLER = " ".join(["and the garden needs water every single day"] * 6)  # enough tokens to fill a batch


def by_model(request):
    """The re-derivation's model writes "v2: …" facts; the live deriver's keeps its own wording."""
    return (v2_facts if request.get("model") == V2_MODEL else extract_each_turn)(request)


def contents(observations) -> list[str]:
    return [o.content for o in observations]


async def test_a_promoted_derivation_is_read_by_default_and_the_live_deriver_writes_into_it(
    channel, settings, model_server, start_worker
):
    model_server.reply_with(by_model)
    # batches fill at 40 tokens, so a short message stays pending: the promotion must flush it
    worker = start_worker("router,deriver", PEERLOG_DERIVER_FLUSH="false", PEERLOG_DERIVER_BATCH_TOKENS="40")
    here = settings.model_copy(update={"llm": settings.llm.model_copy(update={"base_url": model_server.base_url})})
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.add(
        "w",
        "s",
        [
            ("alice", "I adopted a cat named Miso"),
            ("alice", f"Miso sleeps all day {FILLER}"),
            ("bob", f"I run every morning {FILLER}"),
        ],
    )
    eventually(lambda: len(current_rows(settings)) == 3, 60)

    first = await rederive(here, "v2", DerivationScope("w", "alice", "alice"), model=V2_MODEL, progress=lambda _: None)
    assert (first.messages, first.skipped) == (2, 0)
    await c.add("w", "s", [("alice", "I moved to Oslo")])  # perceived, then pending in the live deriver
    await until(lambda: c.processing_status("w"), lambda s: s.counts.pending == 1)
    original = current_rows(settings)
    assert len(original) == 3
    before_promotion = Timestamp()
    before_promotion.FromDatetime(datetime.now(UTC))

    report = await promote(
        here,
        "v2",
        DerivationScope("w", "alice", "alice"),
        model=V2_MODEL,
        reason="better model",
        progress=lambda _: None,
    )
    # the catch-up derived only what v2 lacked: the message perceived after the rederive
    assert (report.messages, report.skipped) == (1, 2)
    flushed = eventually(
        lambda: [
            r for r in current_rows(settings) if r["observation_id"] not in {o["observation_id"] for o in original}
        ],
        60,
    )
    assert [r["content"] for r in flushed] == ["The target said: I moved to Oslo"]  # into the old derivation
    assert [r for r in current_rows(settings) if r not in flushed] == original  # the rest untouched

    after = await c.add("w", "s", [("alice", f"Miso hates the vet {FILLER}")])
    current = await until(
        lambda: c.all_observations("w", "alice", "alice", token=after.consistency_token), lambda got: len(got) == 4
    )
    assert contents(current) == [
        "v2: i adopted a cat named miso",
        f"v2: miso sleeps all day {FILLER}".lower(),
        "v2: i moved to oslo",
        f"The target said: Miso hates the vet {FILLER}",
    ]
    assert {o.derivation for o in current} == {"v2"}
    old = await c.all_observations("w", "alice", "alice", derivation="original")
    assert contents(old) == [
        "The target said: I adopted a cat named Miso",
        f"The target said: Miso sleeps all day {FILLER}",
        "The target said: I moved to Oslo",
    ]
    bob = await c.all_observations("w", "bob", "bob")  # another pair's pointer did not move
    assert contents(bob) == [f"The target said: I run every morning {FILLER}"]

    representation = await context_pb2_grpc.ContextServiceStub(channel).GetRepresentation(
        context_pb2.GetRepresentationRequest(
            workspace_id="w", observer_id="alice", consistency={"consistency_token": after.consistency_token}
        )
    )
    assert sorted(contents(representation.observations)) == sorted(contents(current))
    then = await context_pb2_grpc.ContextServiceStub(channel).GetRepresentation(
        context_pb2.GetRepresentationRequest(workspace_id="w", observer_id="alice", as_of=before_promotion)
    )
    assert sorted(contents(then.observations)) == sorted(contents(old)[:2])  # as of then: the original, as it was
    status = await until(lambda: c.processing_status("w"), lambda s: s.counts.done == 5)
    assert status.counts.pending == status.counts.in_flight == status.counts.dead_lettered == 0

    table = await asyncio.get_running_loop().run_in_executor(
        None, lambda: comparison(channel.address, "w", "alice", "alice", "v2", base="original", token=channel.token)
    )
    assert [col.header for col in table.columns] == ["original (3)", "v2 (4)"]

    worker.stop()
    rebuilt = await asyncio.get_running_loop().run_in_executor(None, lambda: rebuild(settings, progress=lambda _: None))
    assert rebuilt.switched and set(rebuilt.differences.values()) == {0}, rebuilt.differences
    assert contents(await c.all_observations("w", "alice", "alice")) == contents(current)


async def one_fact_derived(channel, settings, model_server, start_worker):
    """A worker deriving, settings whose model is the test's, and alice's first fact in the original
    derivation: (settings, client)."""
    model_server.reply_with(by_model)
    start_worker("router,deriver")
    here = settings.model_copy(update={"llm": settings.llm.model_copy(update={"base_url": model_server.base_url})})
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.add("w", "s", [("alice", "I adopted a cat named Miso")])
    eventually(lambda: len(current_rows(settings)) == 1, 60)
    return here, c


async def test_promoting_a_name_that_holds_nothing_or_a_pair_that_perceived_nothing_is_refused_before_any_work(
    channel, settings, model_server, start_worker
):
    here, c = await one_fact_derived(channel, settings, model_server, start_worker)
    asked, rows = len(model_server.chat_requests()), current_rows(settings)
    # a misspelt name derived alice's whole history with the deriver's model, then switched her reads to it
    with pytest.raises(ValueError, match=r"derivation 'V2' holds nothing in \(alice, alice\).*--from-scratch"):
        await promote(here, "V2", DerivationScope("w", "alice", "alice"), progress=lambda _: None)
    # the pair the wrong way round: bob never perceived alice, and its promotion was appended all the same
    with pytest.raises(ValueError, match=r"\(bob, alice\) has perceived nothing"):
        await promote(here, "v2", DerivationScope("w", "bob", "alice"), progress=lambda _: None, from_scratch=True)
    assert len(model_server.chat_requests()) == asked and current_rows(settings) == rows
    after = await c.add("w", "s", [("alice", "I moved to Oslo")])
    current = await until(
        lambda: c.all_observations("w", "alice", "alice", token=after.consistency_token), lambda got: len(got) == 2
    )
    assert {o.derivation for o in current} == {""}  # still read from the original derivation ("")


async def promoted_to_v2(here, c: Client) -> list:
    """Promote alice's own store to v2 and read it once v2 holds her first fact."""
    moved = await promote(
        here, "v2", DerivationScope("w", "alice", "alice"), model=V2_MODEL, progress=lambda _: None, from_scratch=True
    )
    return await until(
        lambda: c.all_observations("w", "alice", "alice", token=moved.consistency_token),
        lambda got: "v2: i adopted a cat named miso" in contents(got),
    )


async def write_peanuts(c: Client):
    """A client writes alice's allergy into her own store, under its own id "peanuts"."""
    new = observations_pb2.NewObservation(content="alice is allergic to peanuts", observation_id="peanuts")
    return await c.create_observations("w", "alice", "alice", [new])


async def test_promoting_back_to_the_original_derivation_catches_it_up(channel, settings, model_server, start_worker):
    here, c = await one_fact_derived(channel, settings, model_server, start_worker)
    pair = DerivationScope("w", "alice", "alice")
    await promote(here, "v2", pair, model=V2_MODEL, progress=lambda _: None, from_scratch=True)
    after = await c.add("w", "s", [("alice", "I moved to Oslo")])
    await until(
        lambda: c.all_observations("w", "alice", "alice", token=after.consistency_token), lambda got: len(got) == 2
    )

    back = await promote(here, "original", pair, progress=lambda _: None)
    assert (back.name, back.messages) == ("original", 1)  # what only v2 had: the message sent while it was current
    current = await until(
        lambda: c.all_observations("w", "alice", "alice", token=back.consistency_token), lambda got: len(got) == 2
    )
    assert contents(current) == ["The target said: I adopted a cat named Miso", "The target said: I moved to Oslo"]
    assert {o.derivation for o in current} == {""}


async def test_what_a_client_wrote_stays_in_reads_through_promotions_and_its_deletion_holds_in_every_derivation(
    channel, settings, model_server, start_worker
):
    here, c = await one_fact_derived(channel, settings, model_server, start_worker)
    await write_peanuts(c)
    pair = DerivationScope("w", "alice", "alice")
    current = await promoted_to_v2(here, c)
    assert contents(current) == ["alice is allergic to peanuts", "v2: i adopted a cat named miso"]
    assert [(o.observation_id, o.derivation) for o in current][0] == ("peanuts", "*")
    for name in ("original", "v2"):  # named reads show it too: it is no derivation's
        assert "alice is allergic to peanuts" in contents(
            await c.all_observations("w", "alice", "alice", derivation=name)
        )
    context = await context_pb2_grpc.ContextServiceStub(channel).GetContext(
        context_pb2.GetContextRequest(
            workspace_id="w",
            session_id="s",
            observer_id="alice",
        )
    )
    assert "alice is allergic to peanuts" in context.representation

    await c.delete_observation("w", "peanuts", reason="a test result said otherwise")
    back = await promote(here, "original", pair, progress=lambda _: None)
    after = await c.all_observations("w", "alice", "alice", token=back.consistency_token)
    assert contents(after) == ["The target said: I adopted a cat named Miso"]  # deleted once, gone from every one
    rebuilt = await asyncio.get_running_loop().run_in_executor(None, lambda: rebuild(settings, progress=lambda _: None))
    assert rebuilt.switched and set(rebuilt.differences.values()) == {0}, rebuilt.differences


async def test_a_dreams_update_of_a_clients_observation_survives_a_promotion(
    channel, settings, model_server, start_worker
):
    here, c = await one_fact_derived(channel, settings, model_server, start_worker)
    await write_peanuts(c)
    cat = next(o for o in await c.all_observations("w", "alice", "alice") if o.observation_id != "peanuts")
    # the dreamer's own rule, on the current derivation, replaces the client's fact
    dream = Dream("w", "alice", "alice", "dream-1", DREAMER, "dream-1")
    known = {
        "peanuts": NamedObservation("alice", "alice", "explicit", True, "alice is allergic to peanuts", PAIR_WIDE),
        cat.observation_id: NamedObservation("alice", "alice", "explicit", True, cat.content),
    }
    update = UpdateKnowledge(
        outdated_id="peanuts", content="alice outgrew her peanut allergy", premise_ids=[cat.observation_id]
    )
    edit = decide_edit(DreamWrites(), known, update, dream, vector=())
    assert edit.accepted, edit.reply
    await c.all_observations("w", "alice", "alice", token=append(settings, edit.events))

    current = await promoted_to_v2(here, c)
    assert contents(current) == ["alice outgrew her peanut allergy", "v2: i adopted a cat named miso"]


async def test_a_staged_rederivation_leaves_a_clients_observation_as_current_reads_show_it(
    channel, settings, model_server, start_worker
):
    model_server.reply_with(
        lambda request: (
            with_fact(lambda text: "alice is allergic to peanuts")(request)
            if request.get("model") == V2_MODEL
            else Reply(content={"facts": []})
        )  # the live deriver finds nothing
    )
    start_worker("router,deriver")
    here = settings.model_copy(update={"llm": settings.llm.model_copy(update={"base_url": model_server.base_url})})
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await write_peanuts(c)
    sent = await c.add("w", "s", [("alice", "I am allergic to peanuts")])
    await until(
        lambda: c.processing_status("w", token=sent.consistency_token),
        lambda s: s.counts.done == 1 and s.counts.pending == s.counts.in_flight == 0,
    )
    staged = await rederive(here, "v2", DerivationScope("w", "alice", "alice"), model=V2_MODEL, progress=lambda _: None)
    assert staged.messages == 1
    now = await c.all_observations("w", "alice", "alice", token=staged.consistency_token)
    assert [(o.observation_id, o.times_derived, o.source_count) for o in now] == [("peanuts", 1, 0)]


async def test_a_deleted_derived_fact_stays_deleted_after_promoting_another_derivation(
    channel, settings, model_server, start_worker
):
    cat, oslo, run, vet = (
        f"The target said: {text}"
        for text in ("I adopted a cat named Miso", "I moved to Oslo", "I run every morning", "Miso hates the vet")
    )
    here, c = await one_fact_derived(channel, settings, model_server, start_worker)
    pair = DerivationScope("w", "alice", "alice")
    # staged before the deletion, in the original's words (the deriver's model): v2 holds its own copy of the cat
    await rederive(here, "v2", pair, progress=lambda _: None)
    await c.add("w", "s", [("alice", "I moved to Oslo"), ("alice", "I run every morning")])
    eventually(lambda: len(current_rows(settings)) == 3, 60)
    original = {r["content"]: r["observation_id"] for r in current_rows(settings)}
    for wrong in (cat, oslo):
        await c.delete_observation("w", original[wrong], reason="false")

    moved = await promote(here, "v2", pair, progress=lambda _: None)
    current = await c.all_observations("w", "alice", "alice", token=moved.consistency_token)
    assert [(o.content, o.derivation) for o in current] == [(run, "v2")]
    # v2 derived the cat (before the deletion) and Oslo (while promoting) again, each deleted as its original was
    v2 = await c.all_observations("w", "alice", "alice", derivation="v2", include_deleted=True)
    assert [(o.content, o.delete_reason.endswith("from the same message) was deleted: false")) for o in v2] == [
        (cat, True),
        (oslo, True),
        (run, False),
    ]

    sent = await c.add("w", "s", [("alice", "Miso hates the vet")])  # derived into v2 by the live deriver
    in_v2 = await until(
        lambda: c.all_observations("w", "alice", "alice", token=sent.consistency_token),
        lambda got: vet in contents(got),
    )
    await c.delete_observation("w", next(o.observation_id for o in in_v2 if o.content == vet), reason="false")
    back = await promote(here, "original", pair, progress=lambda _: None)
    assert back.messages == 1  # the vet, derived into the original again, and deleted with it
    after = await c.all_observations("w", "alice", "alice", token=back.consistency_token)
    assert [(o.content, o.derivation) for o in after] == [(run, "")]

    rebuilt = await asyncio.get_running_loop().run_in_executor(None, lambda: rebuild(settings, progress=lambda _: None))
    assert rebuilt.switched and set(rebuilt.differences.values()) == {0}, rebuilt.differences
    assert contents(await c.all_observations("w", "alice", "alice")) == [run]


async def test_a_message_the_router_was_committing_during_a_promotion_is_in_the_promoted_derivation(
    channel, settings, model_server, start_worker
):
    start_worker("router")
    await perceived(channel, [FIRST])
    here, pair = settings_for(settings, model_server), DerivationScope("w", "alice", "alice")
    model_server.reply_with(with_fact(lambda _: FACT))
    await rederive(here, "v2", pair, progress=lambda _: None)
    [[first]] = perceived_log(here, pair).values()
    late = first.model_copy(update={"event_id": new_id(), "message_id": "m-late", "seq": first.seq + 1})
    router, commits = None, []

    def meanwhile(line: str) -> None:
        """The router perceives alice's next message after the bulk pass read the log, and commits it just
        after the promotion is appended: it sits before the promotion, in the old derivation's share."""
        nonlocal router
        if router is None:
            router, _ = open_transaction(settings, PERCEIVED, encode(late), late.key.encode())
        elif "now read derivation" in line:
            commits.append(threading.Timer(2.0, router.commit_transaction, (30,)))
            commits[0].start()

    report = await promote(here, "v2", pair, progress=meanwhile)
    commits[0].join()

    [history] = perceived_log(here, pair).values()
    order = [e.message_id if isinstance(e, MessagePerceived) else e.derivation for e in history]
    assert order == [first.message_id, "m-late", "v2"]  # the live deriver writes m-late into the original
    assert report.messages == 1 and "m-late" in finished(here, pair).of("v2", late.key)[0]
