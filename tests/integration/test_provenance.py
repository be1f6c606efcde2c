"""Provenance is enforced where observations are projected, and the audit trail shows every step.

Derived observations are appended to the log as the dreamer appends them; the projector applies the
provenance rule, so a rebuild from the log gives the same store.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from functools import partial

import grpc
import pytest
from google.protobuf import timestamp_pb2

from peerlog.v1 import audit_pb2, context_pb2, context_pb2_grpc, observations_pb2, peers_pb2
from projections.rebuild import rebuild
from services.cli.client import Client
from services.events import (
    Level,
    ObservationAdded,
    ObservationDeleted,
    ObservationSuperseded,
    ProducerInfo,
    Source,
)
from tests.support.observations import append, reinforcements
from tests.support.observations import derived as derived_observation
from tests.support.rpc import rejected

DREAMER = ProducerInfo(component="dreamer", version="0", model="test-model", prompt_version="deduction-v1")


# as the dreamer writes them: its producer, and the dream that derived them
derived = partial(derived_observation, producer=DREAMER, dream_id="dream-1")
# a dream's supersession in alice's store of bob
dream_supersedes = partial(
    ObservationSuperseded, workspace_id="w", observer_id="alice", observed_id="bob", producer=DREAMER
)


@pytest.fixture
async def store(channel, settings):
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob", "carol"))
    sent = await c.add(
        "w",
        "s",
        [
            ("bob", "I live in Oslo, by the harbour"),
            ("bob", "I keep two hives of bees"),
            ("bob", "I go to the market every Saturday"),
        ],
    )
    await c.list_messages("w", "s", sent.consistency_token)

    def explicit(content, span, i):
        return observations_pb2.NewObservation(
            content=content,
            session_id="s",
            sources=[observations_pb2.ObservationSource(message_id=sent.message_ids[i], span=span)],
        )

    made = await c.create_observations(
        "w",
        "alice",
        "bob",
        [
            explicit("Bob lives in Oslo", "I live in Oslo", 0),
            explicit("Bob keeps bees", "two hives of bees", 1),
            explicit("Bob shops at the market on Saturdays", "market every Saturday", 2),
        ],
    )
    carols = await c.create_observations("w", "carol", "bob", ["Bob is tall"])
    oslo, bees, market = made.observation_ids
    token = append(
        settings,
        [
            derived("norway", Level.DEDUCTIVE, "Bob lives in Norway", [oslo]),
            derived("no-premise", Level.DEDUCTIVE, "Bob is happy", []),
            derived("borrowed", Level.DEDUCTIVE, "Bob is tall and lives in Oslo", [carols.observation_ids[0], oslo]),
            derived(
                "thin-pattern",
                Level.INDUCTIVE,
                "Bob likes routine",
                [market],
                pattern_type="tendency",
                confidence="low",
            ),
            derived(
                "pattern",
                Level.INDUCTIVE,
                "Bob keeps up steady outdoor routines",
                [bees, market],
                pattern_type="behaviour",
                confidence="low",
            ),
        ],
    )
    return c, {"oslo": oslo, "bees": bees, "market": market, "messages": sent.message_ids}, token


async def test_a_derived_write_without_valid_premises_is_rejected_and_the_reason_is_in_the_audit(store):
    c, ids, token = store
    got = await c.audit.ListRejectedObservations(
        audit_pb2.ListRejectedObservationsRequest(
            workspace_id="w", observer_id="alice", observed_id="bob", consistency={"consistency_token": token}
        )
    )
    reasons = {r.rejection_id: r.reason for r in got.rejections}
    assert set(reasons) == {"no-premise", "borrowed", "thin-pattern"}
    assert "at least 1 distinct premise" in reasons["no-premise"]
    # the pair's own store is what the projector checks: the same reason whichever pair's partition a
    # rebuild reads first (the workspace's, it was "belongs to (carol, bob)" live and "does not exist" rebuilt)
    assert "is not an observation of (alice, bob)" in reasons["borrowed"]
    assert "at least 2 distinct premise" in reasons["thin-pattern"]
    assert {r.dream_id for r in got.rejections} == {"dream-1"}
    history = await c.audit.GetObservationHistory(
        audit_pb2.GetObservationHistoryRequest(workspace_id="w", observation_id=ids["market"])
    )
    assert [(e.kind, dict(e.detail)) for e in history.entries][1:] == [
        ("cited_by_rejected", {"rejection": "thin-pattern"}),
        ("cited", {"by": "pattern"}),
    ]
    listed = await c.all_observations("w", "alice", "bob")
    assert {o.observation_id for o in listed} == {ids["oslo"], ids["bees"], ids["market"], "norway", "pattern"}


def test_a_premise_of_another_pair_is_rejected_for_one_reason_whichever_partition_comes_first(settings):
    """A deduction of (alice, bob) citing carol's observation, on another pair's partition: the live projector
    and a rebuild may apply the two in either order, and must record the same reason (a rebuild that differs
    does not switch). The reason is the pair's own store's."""
    from sqlalchemy import select

    from projections.apply import Record, apply_batch
    from projections.db import create_schema, sync_engine
    from projections.schema import rejected_observations
    from services.events import encode

    carols = derived("carols", Level.DEDUCTIVE, "Bob is tall", [], observer="carol")
    carols = carols.model_copy(update={"level": Level.EXPLICIT, "premise_ids": ()})
    borrowed = derived("borrowed", Level.DEDUCTIVE, "Bob is tall and lives in Oslo", ["carols"])
    reasons = []
    for n, order in enumerate([([carols], [borrowed]), ([borrowed], [carols])]):
        schema = f"{settings.database.schema_name}_{n}"
        engine = sync_engine(settings.database, schema)
        create_schema(engine, schema)
        for i, events in enumerate(order):
            with engine.begin() as conn:
                apply_batch(conn, [Record(f"t{i}", 0, 0, None, encode(e)) for e in events])
        with engine.connect() as conn:
            reasons.append(conn.scalar(select(rejected_observations.c.reason)))
        engine.dispose()
    assert reasons[0] == reasons[1] and "is not an observation of (alice, bob)" in reasons[0]


async def test_the_history_of_a_rejected_id_says_why_it_was_refused(store):
    c, _, token = store
    history = await c.audit.GetObservationHistory(
        audit_pb2.GetObservationHistoryRequest(
            workspace_id="w", observation_id="borrowed", consistency={"consistency_token": token}
        )
    )
    (entry,) = history.entries
    detail = dict(entry.detail)
    assert (entry.kind, detail["observer_id"], detail["observed_id"]) == ("rejected", "alice", "bob")
    assert "is not an observation of (alice, bob)" in detail["reason"]
    assert (entry.producer.component, entry.producer.prompt_version) == ("dreamer", "deduction-v1")
    with pytest.raises(grpc.RpcError) as never:
        await c.audit.GetObservationHistory(
            audit_pb2.GetObservationHistoryRequest(workspace_id="w", observation_id="never-written")
        )
    assert never.value.code() == grpc.StatusCode.NOT_FOUND


async def test_rejections_are_listed_a_page_at_a_time_newest_first_without_gaps(store, settings):
    c, ids, token = store
    more = [derived(f"bare-{i}", Level.DEDUCTIVE, f"Bob guess {i}", []) for i in range(8)]
    token = append(settings, more)
    pages, tokens, page_token = [], [], ""
    while True:
        got = await c.audit.ListRejectedObservations(
            audit_pb2.ListRejectedObservationsRequest(
                workspace_id="w", limit=3, page_token=page_token, consistency={"consistency_token": token}
            )
        )
        pages.append([(r.rejected_at.ToDatetime(), r.rejection_id) for r in got.rejections])
        page_token = got.next_page_token
        if not page_token:
            break
        tokens.append(page_token)
    listed = [item for p in pages for item in p]
    assert len(listed) == 11 and len(set(listed)) == 11
    assert [len(p) for p in pages[:-1]] == [3] * (len(pages) - 1)
    assert listed == sorted(listed, key=lambda r: (-r[0].timestamp(), r[1]))
    # a token is good only for the list and filters that issued it
    with pytest.raises(grpc.RpcError) as elsewhere:
        await c.audit.ListRejectedObservations(
            audit_pb2.ListRejectedObservationsRequest(
                workspace_id="w", observer_id="alice", observed_id="bob", limit=3, page_token=tokens[0]
            )
        )
    assert elsewhere.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_provenance_walks_from_a_belief_down_to_the_verbatim_spans_of_its_messages(store):
    c, ids, token = store
    got = await c.audit.GetProvenance(
        audit_pb2.GetProvenanceRequest(
            workspace_id="w", observation_id="pattern", consistency={"consistency_token": token}
        )
    )
    assert [n.observation.observation_id for n in got.nodes] == ["pattern", ids["bees"], ids["market"]]
    assert list(got.nodes[0].observation.premise_ids) == [ids["bees"], ids["market"]]
    bees = got.nodes[1].source_messages[0]
    assert (bees.message_id, bees.span, bees.peer_id, bees.content) == (
        ids["messages"][1],
        "two hives of bees",
        "bob",
        "I keep two hives of bees",
    )
    assert not got.missing_ids and not got.truncated


async def test_a_knowledge_update_supersedes_the_old_belief_and_both_histories_show_it(store, settings):
    c, ids, token = store
    await c.all_observations("w", "alice", "bob", token)
    bergen = ObservationAdded(
        workspace_id="w",
        observer_id="alice",
        observed_id="bob",
        observation_id="bergen",
        level=Level.DEDUCTIVE,
        content="Bob now lives in Bergen",
        premise_ids=(ids["oslo"],),
        producer=DREAMER,
        dream_id="dream-2",
    )
    moved = dream_supersedes(
        observation_id=ids["oslo"],
        superseded_by="bergen",
        reason="bob moved",
        causation_id="dream-2",
    )
    late = derived("late", Level.DEDUCTIVE, "Bob lives by a harbour in Norway", [ids["oslo"]])
    token = append(settings, [bergen, moved, late])

    old = await c.audit.GetObservationHistory(
        audit_pb2.GetObservationHistoryRequest(
            workspace_id="w", observation_id=ids["oslo"], consistency={"consistency_token": token}
        )
    )
    assert [e.kind for e in old.entries] == [
        "added",
        "cited",
        "cited_by_rejected",
        "cited",
        "superseded",
        "cited_by_rejected",
    ]
    superseded = old.entries[4]
    assert dict(superseded.detail) == {"by": "bergen", "reason": "bob moved"}
    assert (superseded.producer.component, superseded.producer.prompt_version, superseded.causation_id) == (
        "dreamer",
        "deduction-v1",
        "dream-2",
    )
    new = await c.audit.GetObservationHistory(
        audit_pb2.GetObservationHistoryRequest(workspace_id="w", observation_id="bergen")
    )
    assert [(e.kind, dict(e.detail).get("replaces")) for e in new.entries] == [
        ("added", None),
        ("supersedes", ids["oslo"]),
    ]
    # what rested on Oslo is marked, and nothing new may rest on it
    norway = await c.get_observation("w", "norway")
    assert norway.HasField("premise_superseded_at")
    rejected = await c.audit.ListRejectedObservations(audit_pb2.ListRejectedObservationsRequest(workspace_id="w"))
    assert "was superseded or deleted" in next(r.reason for r in rejected.rejections if r.rejection_id == "late")


async def test_a_supersession_whose_replacement_was_rejected_leaves_the_old_belief_live(store, settings):
    c, ids, token = store
    await c.all_observations("w", "alice", "bob", token)
    # a client withdraws the premise while a dream that read it as live runs
    await c.delete_observation("w", ids["bees"], reason="misheard")
    replacement = derived("hives-moved", Level.DEDUCTIVE, "Bob moved his hives to the market", [ids["bees"]])
    retire = dream_supersedes(
        observation_id=ids["market"],
        superseded_by="hives-moved",
        reason="knowledge update",
        causation_id="dream-3",
    )
    token = append(settings, [replacement, retire])
    live = await c.all_observations("w", "alice", "bob", token)
    assert ids["market"] in {o.observation_id for o in live}
    history = await c.audit.GetObservationHistory(
        audit_pb2.GetObservationHistoryRequest(workspace_id="w", observation_id=ids["market"])
    )
    last = history.entries[-1]
    assert (last.kind, last.detail["by"]) == ("supersession_refused", "hives-moved")
    assert "is not an observation" in last.detail["reason"]


async def test_a_supersession_of_a_belief_retired_meanwhile_is_refused_and_its_history_says_so(store, settings):
    c, ids, token = store
    await c.all_observations("w", "alice", "bob", token)
    await c.delete_observation("w", ids["market"], reason="misheard")
    # a dream that read it as live while the client deleted it: recorded anyway, its history said it was
    # superseded too, while its row stayed deleted and the replacement's said it superseded it
    replacement = derived("saturdays", Level.DEDUCTIVE, "Bob shops on Saturdays", [ids["bees"]])
    retire = dream_supersedes(
        observation_id=ids["market"],
        superseded_by="saturdays",
        reason="knowledge update",
        causation_id="dream-4",
    )
    token = append(settings, [replacement, retire])
    history = await c.audit.GetObservationHistory(
        audit_pb2.GetObservationHistoryRequest(
            workspace_id="w", observation_id=ids["market"], consistency={"consistency_token": token}
        )
    )
    kinds = [e.kind for e in history.entries]
    assert "superseded" not in kinds and kinds[-1] == "supersession_refused"
    assert history.entries[-1].detail["reason"] == "it was already deleted"
    new = await c.audit.GetObservationHistory(
        audit_pb2.GetObservationHistoryRequest(workspace_id="w", observation_id="saturdays")
    )
    assert [e.kind for e in new.entries] == ["added"]


async def test_a_conclusion_citing_a_premise_that_rests_on_a_retired_observation_is_marked(store, settings):
    c, ids, token = store
    await c.all_observations("w", "alice", "bob", token)
    await c.delete_observation("w", ids["oslo"], reason="misheard")
    assert (await c.get_observation("w", "norway")).HasField("premise_superseded_at")
    # a later dream concludes from Norway, still live but resting on the deleted Oslo: it was added clean
    token = append(
        settings,
        [
            derived("scandinavia", Level.DEDUCTIVE, "Bob lives in Scandinavia", ["norway"]),
            derived("nordic", Level.DEDUCTIVE, "Bob lives in a Nordic country", ["scandinavia"]),
            derived("beekeeper", Level.DEDUCTIVE, "Bob is a beekeeper", [ids["bees"]]),
        ],
    )
    scandinavia = await c.get_observation("w", "scandinavia", token)
    assert scandinavia.HasField("premise_superseded_at")
    assert scandinavia.premise_superseded_at.ToDatetime() == scandinavia.created_at.ToDatetime()
    assert (await c.get_observation("w", "nordic")).HasField("premise_superseded_at")
    assert not (await c.get_observation("w", "beekeeper")).HasField("premise_superseded_at")
    tree = await c.audit.GetProvenance(audit_pb2.GetProvenanceRequest(workspace_id="w", observation_id="nordic"))
    assert tree.nodes[0].observation.HasField("premise_superseded_at")


async def test_a_deletion_of_an_observation_already_deleted_leaves_one_deletion_in_its_history(store, settings):
    c, ids, token = store
    await c.all_observations("w", "alice", "bob", token)
    await c.delete_observation("w", ids["market"], reason="misheard")
    # a dream's RemoveDeduction that read it as live while the client deleted it
    removed = ObservationDeleted(
        workspace_id="w",
        observer_id="alice",
        observed_id="bob",
        observation_id=ids["market"],
        reason="contradicted by a later message",
        producer=DREAMER,
        causation_id="dream-5",
    )
    token = append(settings, [removed])
    history = await c.audit.GetObservationHistory(
        audit_pb2.GetObservationHistoryRequest(
            workspace_id="w", observation_id=ids["market"], consistency={"consistency_token": token}
        )
    )
    assert [dict(e.detail).get("reason") for e in history.entries if e.kind == "deleted"] == ["misheard"]
    last = history.entries[-1]
    assert (last.kind, last.causation_id, dict(last.detail)) == (
        "deletion_refused",
        "dream-5",
        {"reason": "it was already deleted", "requested_reason": "contradicted by a later message"},
    )
    assert (await c.get_observation("w", ids["market"])).delete_reason == "misheard"


async def test_a_rebuild_marks_late_conclusions_and_refuses_second_deletions_as_the_live_projector_did(
    channel, settings
):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    made = await c.create_observations("w", "alice", "bob", ["Bob lives in Oslo"])
    (oslo,) = made.observation_ids
    await c.get_observation("w", oslo, made.consistency_token)
    token = append(settings, [derived("norway", Level.DEDUCTIVE, "Bob lives in Norway", [oslo])])
    await c.get_observation("w", "norway", token)
    await c.delete_observation("w", oslo, reason="misheard")
    again = ObservationDeleted(
        workspace_id="w", observer_id="alice", observed_id="bob", observation_id=oslo, producer=DREAMER
    )
    token = append(settings, [derived("nordic", Level.DEDUCTIVE, "Bob is Nordic", ["norway"]), again])
    assert (await c.get_observation("w", "nordic", token)).HasField("premise_superseded_at")
    history = await c.audit.GetObservationHistory(
        audit_pb2.GetObservationHistoryRequest(workspace_id="w", observation_id=oslo)
    )
    assert [e.kind for e in history.entries][-2:] == ["deleted", "deletion_refused"]
    report = await asyncio.to_thread(rebuild, settings, progress=lambda _: None)
    assert report.switched and set(report.differences.values()) == {0}, report.differences


async def test_as_of_reads_return_the_store_and_card_as_they_stood(store, settings, channel):
    c, ids, token = store
    await c.peers.SetPeerCard(
        peers_pb2.SetPeerCardRequest(
            workspace_id="w", observer_id="alice", observed_id="bob", entries=["ATTRIBUTE: lives in Oslo"]
        )
    )
    await c.all_observations("w", "alice", "bob", token)
    await asyncio.sleep(0.05)
    then = timestamp_pb2.Timestamp()
    then.FromDatetime(datetime.now(UTC))
    await asyncio.sleep(0.05)
    moved = dream_supersedes(
        observation_id=ids["oslo"],
        superseded_by="norway",
        reason="more general",
    )
    token = append(settings, [moved])
    await c.peers.SetPeerCard(
        peers_pb2.SetPeerCardRequest(
            workspace_id="w", observer_id="alice", observed_id="bob", entries=["ATTRIBUTE: lives in Bergen"]
        )
    )

    stub = context_pb2_grpc.ContextServiceStub(channel)
    now = await stub.GetRepresentation(
        context_pb2.GetRepresentationRequest(
            workspace_id="w", observer_id="alice", target_id="bob", consistency={"consistency_token": token}
        )
    )
    before = await stub.GetRepresentation(
        context_pb2.GetRepresentationRequest(workspace_id="w", observer_id="alice", target_id="bob", as_of=then)
    )
    assert ids["oslo"] not in {o.observation_id for o in now.observations}
    assert ids["oslo"] in {o.observation_id for o in before.observations}
    card_then = await c.peers.GetPeerCard(
        peers_pb2.GetPeerCardRequest(workspace_id="w", observer_id="alice", observed_id="bob", as_of=then)
    )
    card_now = await c.peers.GetPeerCard(
        peers_pb2.GetPeerCardRequest(workspace_id="w", observer_id="alice", observed_id="bob")
    )
    assert (list(card_then.entries), list(card_now.entries)) == (
        ["ATTRIBUTE: lives in Oslo"],
        ["ATTRIBUTE: lives in Bergen"],
    )
    early = timestamp_pb2.Timestamp(seconds=0)
    empty = await stub.GetRepresentation(
        context_pb2.GetRepresentationRequest(workspace_id="w", observer_id="alice", target_id="bob", as_of=early)
    )
    assert list(empty.observations) == []


async def test_peerlog_audit_prints_the_premise_tree_down_to_spans_and_the_history(store, channel):
    from typer.testing import CliRunner

    from services.cli.main import app

    c, ids, token = store
    await c.all_observations("w", "alice", "bob", token)
    # the command is synchronous: run it off the loop that serves the API
    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["audit", "pattern", "-w", "w", "--address", channel.address],
        env={"COLUMNS": "200", "PEERLOG_AUTH_TOKEN": channel.token},
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert (
        out.index("Bob keeps up steady outdoor routines")
        < out.index("Bob keeps bees")
        < out.index("I keep two hives of bees")
    )
    assert "span: “two hives of bees”" in out and "behaviour; confidence low; dream dream-1" in out
    assert "added" in out and "by dreamer 0 test-model deduction-v1" in out
    missing = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["audit", "nope", "-w", "w", "--address", channel.address],
        env={"PEERLOG_AUTH_TOKEN": channel.token},
    )
    assert (
        missing.exit_code == 2 and "error: NOT_FOUND" in missing.output and "check the observation id" in missing.output
    )
    refused = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["audit", "borrowed", "-w", "w", "--address", channel.address],
        env={"COLUMNS": "200", "PEERLOG_AUTH_TOKEN": channel.token},
    )
    assert refused.exit_code == 0, refused.output
    assert "its write was rejected" in refused.output and "is not an observation of (alice, bob)" in refused.output


async def test_the_provenance_of_a_fact_reinforced_by_many_long_messages_fits_a_default_client(channel, settings):

    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    ids: list[str] = []
    for start in range(0, 50, 10):  # each ~100 kB of UTF-8: 50 of them pass 4 MiB
        sent = await c.add(
            "w", "s", [("bob", f"{i} Bob lives in Oslo. " + "\U0001f600" * 24_970) for i in range(start, start + 10)]
        )
        ids += list(sent.message_ids)
    await c.list_messages("w", "s", sent.consistency_token)
    source = observations_pb2.ObservationSource(message_id=ids[0], span="Bob lives in Oslo")
    made = await c.create_observations(
        "w",
        "alice",
        "bob",
        [observations_pb2.NewObservation(content="Bob lives in Oslo", session_id="s", sources=[source])],
    )
    oid = made.observation_ids[0]
    await c.get_observation("w", oid, made.consistency_token)
    token = append(settings, reinforcements(oid, ids[1:], "Bob lives in Oslo"))
    await c.get_observation("w", oid, token)
    found = await c.audit.GetProvenance(audit_pb2.GetProvenanceRequest(workspace_id="w", observation_id=oid))
    (root,) = found.nodes
    quoted = [m for m in root.source_messages if m.content]  # every source is listed; its message while room lasts
    assert found.truncated and found.ByteSize() < 4 * 1024 * 1024 and len(root.source_messages) == 50
    assert 20 <= len(quoted) < 50 and quoted[0].message_id == ids[0]


async def test_the_provenance_of_facts_whose_spans_quote_whole_messages_fits_a_default_client(channel, settings):
    # each span goes out twice (in its observation and beside its message): counted once, a reply cut at
    # 3.5 MB came to 4.8 MB, past the 4 MiB a default client reads
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    text = "\U0001f600" * 1_990  # about 8 kB of UTF-8, quoted whole by each span
    ids: list[str] = []
    for start in range(0, 100, 25):
        sent = await c.add("w", "s", [("bob", f"{i} {text}") for i in range(start, start + 25)])
        ids += list(sent.message_ids)
    await c.list_messages("w", "s", sent.consistency_token)
    premises = [f"p{n}" for n in range(3)]
    events = []
    for p in premises:
        first = Source(message_id=ids[0], span=text)
        events.append(derived_observation(p, Level.EXPLICIT, f"Bob said {p}", [], sources=(first,)))
        events += reinforcements(p, ids[1:], text)
    token = append(settings, [*events, derived_observation("d", Level.DEDUCTIVE, "Bob repeats himself", premises)])
    await c.get_observation("w", "d", token)
    found = await c.audit.GetProvenance(audit_pb2.GetProvenanceRequest(workspace_id="w", observation_id="d"))
    assert found.truncated and found.ByteSize() < 4 * 1024 * 1024
    assert [n.observation.observation_id for n in found.nodes][:2] == ["d", "p0"]


async def test_a_much_reinforced_facts_history_comes_a_page_at_a_time_without_gaps(channel, settings):
    # sent whole, 20,000 or so entries passed the 4 MiB a default client takes: the audit failed outright
    c = Client(channel)
    await c.setup_conversation("w", "s")
    sent = await c.add("w", "s", [("bob", "Bob lives in Oslo")])
    await c.list_messages("w", "s", sent.consistency_token)
    source = observations_pb2.ObservationSource(message_id=sent.message_ids[0], span="Bob lives in Oslo")
    made = await c.create_observations(
        "w",
        "alice",
        "bob",
        [observations_pb2.NewObservation(content="Bob lives in Oslo", session_id="s", sources=[source])],
    )
    oid = made.observation_ids[0]
    await c.get_observation("w", oid, made.consistency_token)
    token = append(settings, reinforcements(oid, [sent.message_ids[0]] * 1_100, "Bob lives in Oslo"))
    await c.get_observation("w", oid, token)

    entries, page_token, pages = [], "", 0
    while True:
        page = await c.audit.GetObservationHistory(
            audit_pb2.GetObservationHistoryRequest(
                workspace_id="w", observation_id=oid, limit=500, page_token=page_token
            )
        )
        entries += page.entries
        pages, page_token = pages + 1, page.next_page_token
        if not page_token:
            break
    assert pages == 3 and len(entries) == 1_101
    assert [e.kind for e in entries[:2]] == ["added", "reinforced"]
    assert len({e.event_id for e in entries}) == 1_101
    await rejected(
        c.audit.GetObservationHistory(
            audit_pb2.GetObservationHistoryRequest(workspace_id="w", observation_id=oid, limit=5_001)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
