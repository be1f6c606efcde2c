"""Audit results to protos."""

from __future__ import annotations

from sqlalchemy import RowMapping

from peerlog.v1 import audit_pb2, observations_pb2
from services.api.audit import Provenance
from services.api.convert import observation, origin, struct, ts


def provenance(p: Provenance) -> audit_pb2.GetProvenanceResponse:
    nodes = []
    for node in p.nodes:
        sources = []
        for s in node.view.sources:
            m = node.messages.get(s["message_id"])
            out = audit_pb2.SourceMessage(message_id=s["message_id"], span=s["span"])
            if m is not None:
                out.MergeFrom(
                    audit_pb2.SourceMessage(
                        session_id=m["session_id"],
                        peer_id=m["peer_id"],
                        content=m["content"],
                        created_at=ts(m["created_at"]),
                        origin=origin(m) if m["origin_message_id"] else None,
                    )
                )
            sources.append(out)
        nodes.append(audit_pb2.ProvenanceNode(observation=observation(node.view), source_messages=sources))
    return audit_pb2.GetProvenanceResponse(
        root_id=p.root_id, nodes=nodes, missing_ids=p.missing_ids, truncated=p.truncated
    )


def history_entry(row: RowMapping) -> audit_pb2.HistoryEntry:
    return audit_pb2.HistoryEntry(
        event_id=row["event_id"],
        kind=row["kind"],
        occurred_at=ts(row["occurred_at"]),
        producer=audit_pb2.Producer(**row["producer"]),
        causation_id=row["causation_id"] or "",
        detail=struct({k: v for k, v in row["detail"].items() if v is not None}),
    )


def rejection(row: RowMapping) -> audit_pb2.RejectedObservation:
    return audit_pb2.RejectedObservation(
        rejection_id=row["rejection_id"],
        observer_id=row["observer_id"],
        observed_id=row["observed_id"],
        level=row["level"],
        content=row["content"],
        reason=row["reason"],
        sources=[observations_pb2.ObservationSource(**s) for s in row["sources"]],
        premise_ids=list(row["premise_ids"]),
        batch_id=row["batch_id"] or "",
        dream_id=row["dream_id"] or "",
        rejected_at=ts(row["rejected_at"]),
    )
