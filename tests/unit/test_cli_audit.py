"""`peerlog audit` tells provenance cut short for size from provenance that is broken."""

from __future__ import annotations

from rich.console import Console

from peerlog.v1 import audit_pb2, observations_pb2
from services.cli.audit import provenance_tree


def shown(p: audit_pb2.GetProvenanceResponse) -> str:
    console = Console(width=200, record=True)
    console.print(provenance_tree(p))
    return console.export_text()


def node(obs_id: str, premises=(), sources=()) -> audit_pb2.ProvenanceNode:
    o = observations_pb2.Observation(observation_id=obs_id, content=f"fact {obs_id}", premise_ids=list(premises))
    return audit_pb2.ProvenanceNode(observation=o, source_messages=list(sources))


def test_a_premise_or_message_text_left_out_of_a_cut_reply_is_said_so_and_a_missing_premise_is_missing():
    cut_source = audit_pb2.SourceMessage(message_id="m1", span="bees", session_id="s", peer_id="bob")
    p = audit_pb2.GetProvenanceResponse(
        root_id="a", nodes=[node("a", ["b", "c"], [cut_source])], missing_ids=["c"], truncated=True
    )
    text = shown(p)
    # before, a cut premise read as "missing premise b" and a cut source as an empty quote beside its span
    assert "premise b left out: the reply was cut short" in text and "missing premise b" not in text
    assert "missing premise c" in text
    assert "its text left out: the reply was cut short" in text and "“”" not in text
    assert "cut short at 1,000 premises or 3.5 MB" in text
