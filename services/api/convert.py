"""Proto ↔ domain conversions, kept out of the servicers so those stay a few lines each."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf import json_format, struct_pb2, timestamp_pb2
from sqlalchemy import RowMapping

from peerlog.v1 import messages_pb2, peers_pb2, sessions_pb2, workspaces_pb2
from services.api.reads import SessionView
from services.api.writes import MemberSpec, NewMessage


def struct(value: dict) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(value or {})
    return s


def to_dict(value: struct_pb2.Struct) -> dict:
    return json_format.MessageToDict(value)


def ts(value: datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value.astimezone(UTC))
    return out


def from_ts(msg, field: str) -> datetime | None:
    if not msg.HasField(field):
        return None
    return getattr(msg, field).ToDatetime(tzinfo=UTC)


def workspace(row: RowMapping) -> workspaces_pb2.Workspace:
    return workspaces_pb2.Workspace(
        workspace_id=row["workspace_id"], metadata=struct(row["metadata"]), created_at=ts(row["created_at"])
    )


def peer(row: RowMapping) -> peers_pb2.Peer:
    return peers_pb2.Peer(
        workspace_id=row["workspace_id"], peer_id=row["peer_id"], observe_me=row["observe_me"],
        metadata=struct(row["metadata"]), created_at=ts(row["created_at"]),
    )


def membership(row: RowMapping) -> sessions_pb2.Membership:
    out = sessions_pb2.Membership(
        peer_id=row["peer_id"], observe_others=row["observe_others"], joined_at=ts(row["joined_at"])
    )
    if row["observe_me"] is not None:
        out.observe_me = row["observe_me"]
    if row["left_at"] is not None:
        out.left_at.CopyFrom(ts(row["left_at"]))
    return out


def session(view: SessionView) -> sessions_pb2.Session:
    row = view.session
    return sessions_pb2.Session(
        workspace_id=row["workspace_id"], session_id=row["session_id"],
        metadata=struct(row["metadata"]), created_at=ts(row["created_at"]),
        memberships=[membership(m) for m in view.memberships], message_count=row["message_count"],
    )


def member_spec(spec: sessions_pb2.MemberSpec) -> MemberSpec:
    return MemberSpec(
        peer_id=spec.peer_id,
        observe_me=spec.observe_me if spec.HasField("observe_me") else None,
        observe_others=spec.observe_others,
    )


def new_message(m: messages_pb2.NewMessage) -> NewMessage:
    return NewMessage(
        peer_id=m.peer_id, content=m.content, created_at=from_ts(m, "created_at"),
        metadata=to_dict(m.metadata),
    )


def message(row: RowMapping) -> messages_pb2.Message:
    return messages_pb2.Message(
        workspace_id=row["workspace_id"], session_id=row["session_id"], message_id=row["message_id"],
        peer_id=row["peer_id"], content=row["content"], created_at=ts(row["created_at"]),
        metadata=struct(row["metadata"]), seq=row["seq"],
    )
