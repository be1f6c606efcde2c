"""Proto ↔ domain conversions, kept out of the servicers so those stay a few lines each. The audit,
configuration, context and Chat conversions have modules of their own (convert_*.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from google.protobuf import json_format, struct_pb2, timestamp_pb2
from sqlalchemy import RowMapping

from peerlog.v1 import (
    audit_pb2,
    dreams_pb2,
    messages_pb2,
    observations_pb2,
    peers_pb2,
    scopes_pb2,
    sessions_pb2,
    workspaces_pb2,
)
from projections.observation_reads import ObservationFilter
from projections.search_shape import MessageSearch
from projections.status_reads import StatusScope
from services.api import clones, files
from services.api import validation as v
from services.api.convert_configuration import optional_configuration
from services.api.observation_reads import ObservationView, ProcessingStatus, SearchQuery
from services.api.observation_writes import NewObservation
from services.api.reads import MEMBERSHIPS_SHOWN, SessionView
from services.api.scopes import ScopeView
from services.api.uploads import Upload
from services.api.writes import MemberSpec, NewMessage
from services.errors import InvalidArgument
from services.events import Level, Source


def struct(value: dict) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(value or {})
    return s


def json_object(value: struct_pb2.Struct, field: str, max_bytes: int) -> dict:
    """A Struct from a request as a dict; InvalidArgument if it holds NaN or ±Infinity (not JSON), or is so
    large encoded that it cannot be under `max_bytes` as JSON (refused before the costly conversion)."""
    encoded = value.ByteSize()
    if encoded == 0:  # most messages carry no metadata; the conversion costs 2.5 µs even then
        return {}
    if encoded > 8 * max_bytes:  # a number takes at most ~8 times the bytes in protobuf that it takes in JSON
        raise InvalidArgument(f"{field} is {encoded} bytes encoded; the limit is {max_bytes} bytes as JSON")
    try:
        return json_format.MessageToDict(value)
    except ValueError:  # json_format refuses non-finite numbers, which JSON (and jsonb) cannot hold
        raise InvalidArgument(f"{field} holds NaN or Infinity, which JSON cannot express") from None


def metadata(value: struct_pb2.Struct, field: str = "metadata") -> dict:
    """Request metadata as a dict, refused early when hopelessly large; writes.py checks the rest."""
    return json_object(value, field, v.MAX_METADATA_BYTES)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ts(value: datetime) -> timestamp_pb2.Timestamp:
    """`value` as a Timestamp, computed from its offset to the epoch: what FromDatetime gives, at a third
    of its cost (a GetContext answer holds a hundred of them). A naive time is read as local, as there."""
    delta = (value if value.tzinfo else value.astimezone(UTC)) - _EPOCH
    return timestamp_pb2.Timestamp(seconds=delta.days * 86_400 + delta.seconds, nanos=delta.microseconds * 1_000)


# what google.protobuf.Timestamp allows (and datetime can hold): 0001-01-01 to 9999-12-31, UTC
_MIN_TS_SECONDS, _MAX_TS_SECONDS = -62_135_596_800, 253_402_300_799


def as_of(msg) -> datetime | None:
    """A read's `as_of`: None (now) if unset or not in the past, as the API promises (a future time reads as
    now, where a bound in the future would still leave out a turn whose created_at is ahead of the clock)."""
    at = from_ts(msg, "as_of")
    return at if at is not None and at < datetime.now(UTC) else None


def from_ts(msg, field: str) -> datetime | None:
    """The timestamp `field` of `msg`, None if unset; InvalidArgument if it is outside Timestamp's range."""
    if not msg.HasField(field):
        return None
    value = getattr(msg, field)
    # ToDatetime would raise a bare ValueError (or OverflowError) here and surface as INTERNAL
    if not (_MIN_TS_SECONDS <= value.seconds <= _MAX_TS_SECONDS and 0 <= value.nanos < 1_000_000_000):
        raise InvalidArgument(
            f"{field} (seconds={value.seconds}, nanos={value.nanos}) is not a valid timestamp: it must lie "
            "between 0001-01-01 and 9999-12-31 UTC, with nanos from 0 to 999999999"
        )
    return value.ToDatetime(tzinfo=UTC)


def workspace(row: RowMapping) -> workspaces_pb2.Workspace:
    return workspaces_pb2.Workspace(
        workspace_id=row["workspace_id"], metadata=struct(row["metadata"]), created_at=ts(row["created_at"])
    )


def peer(row: RowMapping) -> peers_pb2.Peer:
    return peers_pb2.Peer(
        workspace_id=row["workspace_id"],
        peer_id=row["peer_id"],
        observe_me=row["observe_me"],
        metadata=struct(row["metadata"]),
        created_at=ts(row["created_at"]),
    )


def membership(row: RowMapping) -> sessions_pb2.Membership:
    out = sessions_pb2.Membership(peer_id=row["peer_id"], joined_at=ts(row["joined_at"]))
    if row["observe_me"] is not None:
        out.observe_me = row["observe_me"]
    if row["observe_others"] is not None:
        out.observe_others = row["observe_others"]
    if row["left_at"] is not None:
        out.left_at.CopyFrom(ts(row["left_at"]))
    return out


def shown_memberships(periods: Sequence[RowMapping], most: int) -> list[RowMapping]:
    """The periods a reply shows, in join order: the current ones first in priority, then the newest past
    (session_reads.shown_memberships_of reads only these)."""
    current = [p for p in periods if p["left_at"] is None][:most]
    past = [p for p in periods if p["left_at"] is not None]
    kept = {id(p) for p in current + (past[-(most - len(current)) :] if most > len(current) else [])}
    return [p for p in periods if id(p) in kept]


def session(view: SessionView) -> sessions_pb2.Session:
    row = view.session
    return sessions_pb2.Session(
        workspace_id=row["workspace_id"],
        session_id=row["session_id"],
        metadata=struct(row["metadata"]),
        created_at=ts(row["created_at"]),
        memberships=[membership(m) for m in shown_memberships(view.memberships, MEMBERSHIPS_SHOWN)],
        message_count=row["message_count"],
        membership_periods=view.periods,
    )


def member_spec(spec: sessions_pb2.MemberSpec) -> MemberSpec:
    return MemberSpec(
        peer_id=spec.peer_id,
        observe_me=spec.observe_me if spec.HasField("observe_me") else None,
        observe_others=spec.observe_others if spec.HasField("observe_others") else None,
    )


UPLOAD_HEADER = ("workspace_id", "session_id", "peer_id", "file_name", "idempotency_key")


def _same_file(first, later) -> None:
    """A later request of the stream may repeat the first's header fields, never change them: the file
    goes where the first said (its token was checked for that), and a client sending another is a bug."""
    for name in UPLOAD_HEADER:
        value = getattr(later, name)
        if value and value != getattr(first, name):
            raise InvalidArgument(
                f"UploadFile's requests disagree on {name}: {getattr(first, name)[:100]!r} in the first, "
                f"{value[:100]!r} in a later one; a stream uploads one file, set where the first request says"
            )


async def upload(requests) -> tuple[Upload, bytes]:
    """An UploadFile stream: where the file goes (its first request) and the file, refused as soon as it
    passes 32 MiB rather than after holding all of it."""
    first, pieces, size = None, [], 0
    async for r in requests:
        first = first or r
        _same_file(first, r)
        size += len(r.data)
        files.check_size(size)
        pieces.append(r.data)
    if first is None:
        raise InvalidArgument("UploadFile got no request: the first names the file and where it goes")
    return Upload(
        first.workspace_id, first.session_id, first.peer_id, first.file_name, first.idempotency_key
    ), b"".join(pieces)


def new_message(m: messages_pb2.NewMessage, index: int = 0) -> NewMessage:
    return NewMessage(
        peer_id=m.peer_id,
        content=m.content,
        created_at=from_ts(m, "created_at"),
        metadata=metadata(m.metadata, f"messages[{index}].metadata"),
        message_id=m.message_id,
        configuration=optional_configuration(m, f"messages[{index}].configuration"),
    )


def message(row: RowMapping) -> messages_pb2.Message:
    return messages_pb2.Message(
        workspace_id=row["workspace_id"],
        session_id=row["session_id"],
        message_id=row["message_id"],
        peer_id=row["peer_id"],
        content=row["content"],
        created_at=ts(row["created_at"]),
        metadata=struct(row["metadata"]),
        seq=row["seq"],
        origin=origin(row) if row.get("origin_message_id") else None,
        author_name=row.get("author_name") or "",
    )


def clone_request(r: sessions_pb2.CloneSessionRequest) -> clones.CloneRequest:
    return clones.CloneRequest(
        workspace_id=r.workspace_id,
        session_id=r.session_id,
        new_session_id=r.new_session_id,
        up_to_message_id=r.up_to_message_id,
    )


def origin(row: RowMapping) -> messages_pb2.MessageOrigin:
    return messages_pb2.MessageOrigin(
        workspace_id=row["origin_workspace_id"],
        session_id=row["origin_session_id"],
        message_id=row["origin_message_id"],
    )


LEVEL_TO_PROTO = {
    Level.EXPLICIT: observations_pb2.OBSERVATION_LEVEL_EXPLICIT,
    Level.DEDUCTIVE: observations_pb2.OBSERVATION_LEVEL_DEDUCTIVE,
    Level.INDUCTIVE: observations_pb2.OBSERVATION_LEVEL_INDUCTIVE,
    Level.CONTRADICTION: observations_pb2.OBSERVATION_LEVEL_CONTRADICTION,
}
LEVEL_OF_PROTO = {number: level for level, number in LEVEL_TO_PROTO.items()}


def levels(values) -> tuple[str, ...]:
    """The levels a request filters on, each once; UNSPECIFIED entries filter nothing. Each once: a
    request repeating a level 70,000 times made one SQL parameter of each, past Postgres's 65,535."""
    out = []
    for number in values:
        if number == observations_pb2.OBSERVATION_LEVEL_UNSPECIFIED:
            continue
        if number not in LEVEL_OF_PROTO:
            raise InvalidArgument(
                f"levels: {number} is not an ObservationLevel; use EXPLICIT, DEDUCTIVE, INDUCTIVE or CONTRADICTION"
            )
        out.append(LEVEL_OF_PROTO[number].value)
    return tuple(dict.fromkeys(out))


def list_filter(r: observations_pb2.ListObservationsRequest) -> ObservationFilter:
    return ObservationFilter(
        workspace_id=r.workspace_id,
        observer_id=r.observer_id,
        observed_id=r.observed_id,
        levels=levels(r.levels),
        session_id=r.session_id,
        include_superseded=r.include_superseded,
        include_deleted=r.include_deleted,
        derivation=r.derivation,
        as_of=as_of(r),
    )


def search_query(r: observations_pb2.SearchObservationsRequest) -> SearchQuery:
    pair = ObservationFilter(
        workspace_id=r.workspace_id,
        observer_id=r.observer_id,
        observed_id=r.observed_id,
        levels=levels(r.levels),
        as_of=as_of(r),
    )
    max_distance = r.max_distance if r.HasField("max_distance") else None
    return SearchQuery(pair=pair, text=r.query, top_k=r.top_k, max_distance=max_distance, scope_id=r.scope_id)


def scope(view: ScopeView) -> scopes_pb2.Scope:
    row = view.row
    return scopes_pb2.Scope(
        workspace_id=row["workspace_id"],
        scope_id=row["scope_id"],
        name=row["name"],
        session_ids=view.session_ids,
        created_at=ts(row["created_at"]),
    )


def new_observation(o: observations_pb2.NewObservation) -> NewObservation:
    sources = tuple(Source(message_id=s.message_id, span=s.span) for s in o.sources)
    return NewObservation(content=o.content, session_id=o.session_id, sources=sources, observation_id=o.observation_id)


def observation(view: ObservationView) -> observations_pb2.Observation:
    row = view.row
    out = observations_pb2.Observation(
        workspace_id=row["workspace_id"],
        observation_id=row["observation_id"],
        observer_id=row["observer_id"],
        observed_id=row["observed_id"],
        level=LEVEL_TO_PROTO[Level(row["level"])],
        content=row["content"],
        session_id=row["session_id"] or "",
        confidence=row["confidence"] or "",
        pattern_type=row["pattern_type"] or "",
        times_derived=row["times_derived"],
        created_at=ts(row["created_at"]),
        superseded_by=row["superseded_by"] or "",
        delete_reason=row["delete_reason"] or "",
        sources=[observations_pb2.ObservationSource(message_id=s["message_id"], span=s["span"]) for s in view.sources],
        premise_ids=view.premise_ids,
        dream_id=row["dream_id"] or "",
        derivation=row["derivation"],
        source_count=view.source_count,
    )
    for name in ("superseded_at", "deleted_at", "premise_superseded_at"):
        if row[name] is not None:
            getattr(out, name).CopyFrom(ts(row[name]))
    return out


def match(view: ObservationView) -> observations_pb2.ObservationMatch:
    return observations_pb2.ObservationMatch(observation=observation(view), distance=float(view.row["distance"]))


def status_scope(r: observations_pb2.GetProcessingStatusRequest) -> StatusScope:
    return StatusScope(
        workspace_id=r.workspace_id, observer_id=r.observer_id, observed_id=r.observed_id, session_id=r.session_id
    )


BATCH_IDS_SHOWN = 100  # 100 batches of 1,024 ids each passed the 4 MiB a status reply may hold


def dead_lettered_batch(row: RowMapping) -> observations_pb2.DeadLetteredBatch:
    out = observations_pb2.DeadLetteredBatch(
        batch_id=row["batch_id"],
        observer_id=row["observer_id"],
        observed_id=row["observed_id"],
        message_ids=row["message_ids"][:BATCH_IDS_SHOWN],
        error=row["error"] or "",
        message_count=len(row["message_ids"]),
    )
    if row["finished_at"] is not None:
        out.failed_at.CopyFrom(ts(row["finished_at"]))
    return out


def dead_lettered_summary(row: RowMapping) -> observations_pb2.DeadLetteredSummary:
    out = observations_pb2.DeadLetteredSummary(
        session_id=row["session_id"] or "", error=row["error"], attempts=row["attempts"]
    )
    out.failed_at.CopyFrom(ts(row["failed_at"]))
    return out


def processing_status(status: ProcessingStatus) -> observations_pb2.GetProcessingStatusResponse:
    return observations_pb2.GetProcessingStatusResponse(
        counts=observations_pb2.ProcessingCounts(**status.counts),
        dead_lettered_batches=[dead_lettered_batch(r) for r in status.dead_lettered],
        dreams=observations_pb2.DreamCounts(**status.dreams),
        dead_lettered_summaries=[dead_lettered_summary(r) for r in status.dead_summaries],
    )


def summary(row: RowMapping) -> sessions_pb2.SessionSummary:
    return sessions_pb2.SessionSummary(
        content=row["content"],
        last_message_id=row["last_message_id"],
        last_seq=row["last_seq"],
        messages_covered=row["messages_covered"],
        token_count=row["token_count"],
        model=row["model"],
        created_at=ts(row["created_at"]),
    )


def session_summaries(by_kind: dict[str, RowMapping]) -> sessions_pb2.GetSessionSummariesResponse:
    out = sessions_pb2.GetSessionSummariesResponse()
    for kind, field in (("short", "short_summary"), ("long", "long_summary")):
        if kind in by_kind:
            getattr(out, field).CopyFrom(summary(by_kind[kind]))
    return out


def dream(row: RowMapping) -> dreams_pb2.Dream:
    out = dreams_pb2.Dream(
        dream_id=row["dream_id"],
        observer_id=row["observer_id"],
        observed_id=row["observed_id"],
        reason=row["reason"],
        new_explicit=row["new_explicit"],
        state=row["state"],
        edits=row["edits"] or 0,
        error=row["error"] or "",
        requested_at=ts(row["requested_at"]),
    )
    for name in ("started_at", "finished_at"):
        if row[name] is not None:
            getattr(out, name).CopyFrom(ts(row[name]))
    return out


def peer_card(card) -> peers_pb2.PeerCard:
    out = peers_pb2.PeerCard(
        workspace_id=card.workspace_id,
        observer_id=card.observer_id,
        observed_id=card.observed_id,
        entries=list(card.entries),
    )
    if card.updated_at is not None:
        out.updated_at.CopyFrom(ts(card.updated_at))
    if card.producer:
        out.producer.CopyFrom(audit_pb2.Producer(**card.producer))
    out.dream_id = card.dream_id or ""
    return out


def message_query(r, **scope) -> MessageSearch:
    """The search of any SearchMessages request (no vector yet); `scope` fixes what the request's level implies."""
    fields = dict(
        workspace_id=r.workspace_id,
        query=r.query,
        vector=None,
        perspective_id=r.perspective_peer_id,
        after=from_ts(r, "after"),
        before=from_ts(r, "before"),
        limit=r.limit,
        include_adjacent=r.include_adjacent,
        zone=v.time_zone("time_zone", r.time_zone),
    )
    for name, proto_field in (("session_ids", "session_ids"), ("author_ids", "author_peer_ids")):
        if hasattr(r, proto_field):
            fields[name] = tuple(getattr(r, proto_field))
    return MessageSearch(**{**fields, **scope})


def search_messages_response(rows, adjacent, embedding_model: str) -> messages_pb2.SearchMessagesResponse:
    """`adjacent` maps (session_id, seq) to the turns around the hits, when the request asked for them."""

    def scored(r):
        around = {
            name: message(a)
            for name, d in (("previous", -1), ("next", 1))
            if (a := adjacent.get((r["session_id"], r["seq"] + d))) is not None
        }
        return messages_pb2.ScoredMessage(message=message(r), score=r["score"], **around)

    results, size = [], 0
    for r in rows:
        hit = scored(r)
        size += hit.ByteSize() + 8  # with the element's tag and length
        if size > v.MAX_PAGE_BYTES and results:  # the rest would pass gRPC's 4 MiB: the reply says it was cut
            return messages_pb2.SearchMessagesResponse(results=results, embedding_model=embedding_model, truncated=True)
        results.append(hit)
    return messages_pb2.SearchMessagesResponse(results=results, embedding_model=embedding_model)
