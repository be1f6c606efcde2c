"""Write-side service functions of a pair's store: explicit observations from a client, and deletion."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from projections import message_reads, observation_reads
from services.api import idempotency
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.entry_room import check_observation_ids
from services.api.freshness import abandoned, answered_in_time, until_projected
from services.api.guards import require_peers, require_scope
from services.api.locks import held
from services.api.observation_reads import get_observation
from services.api.writes import commit
from services.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from services.events import PAIR_WIDE, Level, ObservationAdded, ObservationDeleted, PackedVector, Source, new_id
from services.events.requests import KeyedRequest
from services.events.text import normalise


@dataclass(frozen=True)
class NewObservation:
    content: str
    session_id: str = ""
    sources: tuple[Source, ...] = ()
    observation_id: str = ""  # the client's; empty: peerlog assigns one


def _validate(new: Sequence[NewObservation]) -> None:
    v.check_observation_count(len(new))
    for i, o in enumerate(new):
        v.check_text(f"observations[{i}].content", o.content, v.MAX_OBSERVATION_CHARS)
        if o.session_id:
            v.check_id(f"observations[{i}].session_id", o.session_id)
        v.check_source_count(i, len(o.sources))
        for j, s in enumerate(o.sources):
            v.check_id(f"observations[{i}].sources[{j}].message_id", s.message_id)
            v.check_no_nul(f"observations[{i}].sources[{j}].span", s.span)
            if len(s.span) > v.MAX_OBSERVATION_CHARS:  # a quote, not a copy: its message holds the rest
                raise InvalidArgument(
                    f"observations[{i}].sources[{j}].span has {len(s.span)} characters; the limit is "
                    f"{v.MAX_OBSERVATION_CHARS}: quote the words that support the observation"
                )
        if o.observation_id:
            v.check_id(f"observations[{i}].observation_id", o.observation_id)
    v.check_distinct("observation_id", [o.observation_id for o in new if o.observation_id])


async def _check_sessions(ctx: ApiDeps, workspace_id: str, new: Sequence[NewObservation]) -> None:
    sessions = sorted({o.session_id for o in new if o.session_id})
    if sessions:  # to a narrow token, a session its peers never joined is missing (guards.check_scope)
        await require_scope(ctx, workspace_id, sessions)


async def _check_sources(ctx: ApiDeps, workspace_id: str, observer_id: str, new: Sequence[NewObservation]) -> None:
    """NotFound for a cited message the workspace lacks or the observer never saw (one answer for both, so a
    peer's token learns nothing of other sessions' message ids); InvalidArgument for a span not in its message."""
    cited_ids = [s.message_id for o in new for s in o.sources]
    async with ctx.engine.connect() as conn:
        found = await message_reads.messages_by_id(conn, workspace_id, cited_ids)
        visible = await message_reads.seen_by(conn, workspace_id, observer_id, cited_ids) if cited_ids else set()
    for i, o in enumerate(new):
        for j, s in enumerate(o.sources):
            cited = found.get(s.message_id)
            if cited is None or s.message_id not in visible:
                raise NotFound(
                    f"observations[{i}].sources[{j}] cites message {s.message_id!r}, which does not exist in "
                    f"workspace {workspace_id!r} or which {observer_id!r} could not see (it was not a member of "
                    "that session when the message was sent); a pair's store may only cite what its observer saw"
                )
            if o.session_id and cited["session_id"] != o.session_id:
                # an allowlist judges an explicit observation by its session: it must be where its words were said
                raise InvalidArgument(
                    f"observations[{i}].sources[{j}] cites message {s.message_id!r} of session "
                    f"{cited['session_id']!r}, not of observations[{i}].session_id {o.session_id!r}; an "
                    "observation cites only messages of its own session (or leave session_id empty)"
                )
            if normalise(s.span) not in normalise(cited["content"]):
                raise InvalidArgument(
                    f"observations[{i}].sources[{j}].span {s.span[:80]!r} is not in message {s.message_id!r}; "
                    "quote the message verbatim (case and whitespace may differ) or leave the span empty"
                )


def _fingerprinted(o: NewObservation) -> NewObservation | dict:
    """`o` as its request's fingerprint takes it: without an unset client id, so a key used before ids
    existed still matches its first request."""
    return o if o.observation_id else {k: v for k, v in dataclasses.asdict(o).items() if k != "observation_id"}


def _same(row, sources, observer_id: str, observed_id: str, o: NewObservation) -> bool:
    """Whether the stored observation `row` (with the `sources` its ObservationAdded recorded) is `o` sent
    again to the pair."""
    stored = tuple(Source(message_id=s["message_id"], span=s["span"]) for s in sources)
    return (row["observer_id"], row["observed_id"], row["level"], row["content"], row["session_id"] or "", stored) == (
        observer_id,
        observed_id,
        Level.EXPLICIT.value,
        o.content,
        o.session_id,
        o.sources,
    )


async def _written_before(
    ctx: ApiDeps, workspace_id: str, observer_id: str, observed_id: str, new: Sequence[NewObservation]
) -> set[str]:
    """The client ids in `new` that name the same observation already written (a repeat writes it no
    more); AlreadyExists for an id a different observation has taken."""
    ids = [o.observation_id for o in new if o.observation_id]
    if not ids:
        return set()
    async with ctx.engine.connect() as conn:
        rows = await observation_reads.observations_by_id(conn, workspace_id, ids)
        # as written: the sources a reinforcement added since are the deriver's, not the client's request
        sources = await observation_reads.sources_added_with(conn, workspace_id, list(rows.values())) if rows else {}
    for i, o in enumerate(new):
        row = rows.get(o.observation_id)
        if row is not None and not _same(row, sources[o.observation_id], observer_id, observed_id, o):
            # what the other observation says stays unsaid: it may be in a store the caller cannot read
            raise AlreadyExists(
                f"observations[{i}].observation_id {o.observation_id!r} is already used in workspace "
                f"{workspace_id!r} by a different observation; send a new id, or send that observation "
                "unchanged (pair, content, session and sources) to get its id back"
            )
        if row is not None and row["deleted_at"] is not None:
            # answered OK, it would stay deleted: the client would take the fact for remembered
            raise FailedPrecondition(
                f"observations[{i}].observation_id {o.observation_id!r} was deleted at "
                f"{row['deleted_at'].isoformat()}; to state it again, send it under a new id"
            )
    return set(rows)


async def create_observations(
    ctx: ApiDeps,
    workspace_id: str,
    observer_id: str,
    observed_id: str,
    new: Sequence[NewObservation],
    idempotency_key: str = "",
    token: str = "",
) -> tuple[list[str], str]:
    """Append explicit observations to a pair's store atomically; returns their ids and the token. Under a
    used idempotency key, the first call's reply instead (services/api/idempotency.py). What they cite is
    checked once the projections hold the caller's `token` (its writes)."""
    # the ids before any read: a keyed call looks its key up under the pair first
    for field, value in (("workspace_id", workspace_id), ("observer_id", observer_id), ("observed_id", observed_id)):
        v.check_id(field, value)
    _validate(new)
    check_observation_ids(workspace_id, observer_id, observed_id, [o.observation_id for o in new])
    await ctx.freshness.wait(token)
    keyed = idempotency.keyed(
        workspace_id, (workspace_id, observer_id, observed_id), idempotency_key, [_fingerprinted(o) for o in new]
    )
    return await idempotency.once(
        ctx, keyed, lambda request: _append_observations(ctx, workspace_id, observer_id, observed_id, new, request)
    )


async def _append_observations(
    ctx: ApiDeps,
    workspace_id: str,
    observer_id: str,
    observed_id: str,
    new: Sequence[NewObservation],
    request: KeyedRequest | None,
) -> tuple[list[str], str]:
    await require_peers(ctx, workspace_id, observer_id=observer_id, observed_id=observed_id)
    await _check_sessions(ctx, workspace_id, new)
    await _check_sources(ctx, workspace_id, observer_id, new)
    # embedded here and carried in the events, so replaying the log never calls a model; before any
    # claim, so no connection is held across a model call
    vectors = await ctx.embedder.embed([o.content for o in new])
    pair = (workspace_id, observer_id, observed_id)
    chosen = sorted({o.observation_id for o in new if o.observation_id})
    if not chosen:
        return await _append_new(ctx, pair, new, vectors, set(), request)
    claim = _claimed_append(ctx, pair, new, vectors, request, chosen)
    return await answered_in_time(
        ctx.freshness,
        claim,
        f"the write of observation id(s) {v.listed(chosen)}",
        "it stands: the same observations sent again under their ids return them once readable",
        keyed=request is not None,
    )


async def _claimed_append(
    ctx: ApiDeps,
    pair: tuple[str, str, str],
    new: Sequence[NewObservation],
    vectors: Sequence[Sequence[float]],
    request: KeyedRequest | None,
    chosen: Sequence[str],
) -> tuple[list[str], str]:
    """The append of observations with ids the client chose, held (locks.held), held until
    readable however long that takes. Unclaimed, two writes of one id in two pairs were both acknowledged: the projector kept
    the first and gave it the second's sources, a message of the other pair's sessions among them."""
    async with held(ctx.engine, [("observation", pair[0], i) for i in chosen], abandoned):
        written = await _written_before(ctx, *pair, new)
        ids, token = await _append_new(ctx, pair, new, vectors, written, request)
        await until_projected(ctx.freshness, token)  # held until a later writer of these ids can see them
        return ids, token


async def _append_new(
    ctx: ApiDeps,
    pair: tuple[str, str, str],
    new: Sequence[NewObservation],
    vectors: Sequence[Sequence[float]],
    written: set[str],
    request: KeyedRequest | None,
) -> tuple[list[str], str]:
    """The append of those of `new` not `written` before (each with its vector), answered at the ack."""
    workspace_id, observer_id, observed_id = pair
    fresh = [(o, vector) for o, vector in zip(new, vectors, strict=True) if o.observation_id not in written]
    if request is not None and written and fresh:
        # a key stands for one append of the whole request; part of it written before cannot be in it
        raise FailedPrecondition(
            f"observation id(s) {v.listed([repr(i) for i in sorted(written)])} were written by an earlier call, "
            f"the rest of this request under idempotency key {request.key!r} not: send the new observations "
            "on their own, or repeat the earlier call under its own key"
        )
    events = [
        ObservationAdded(
            workspace_id=workspace_id,
            observer_id=observer_id,
            observed_id=observed_id,
            derivation=PAIR_WIDE,  # in every derivation: a promotion must not hide a client's write
            observation_id=o.observation_id or new_id(),
            level=Level.EXPLICIT,
            content=o.content,
            session_id=o.session_id or None,
            sources=o.sources,
            embedding=PackedVector.of(vector),
            embedding_model=ctx.embedder.model_name,
            producer=ctx.producer,
            request=request,
        )
        for o, vector in fresh
    ]
    token = await commit(ctx, events, wait=False)
    made = iter(e.observation_id for e in events)
    return [o.observation_id if o.observation_id in written else next(made) for o in new], token


async def delete_observation(ctx: ApiDeps, workspace_id: str, observation_id: str, reason: str, token: str = "") -> str:
    """Withdraw an observation (an event; its history stays); returns once lists no longer show it. The
    observation is looked for once the projections hold the caller's `token` (its write)."""
    v.check_text("reason", reason, v.MAX_REASON_CHARS, required=False)
    await ctx.freshness.wait(token)
    row = (await get_observation(ctx, workspace_id, observation_id)).row  # NOT_FOUND before any lock
    # one delete at a time: two at once were both told OK, and the history showed two deletions
    async with ctx.exclusive("observation", workspace_id, observation_id):
        row = (await get_observation(ctx, workspace_id, observation_id)).row
        if row["deleted_at"] is not None:
            raise FailedPrecondition(
                f"observation {observation_id!r} was already deleted at {row['deleted_at'].isoformat()}"
            )
        event = ObservationDeleted(
            workspace_id=workspace_id,
            observer_id=row["observer_id"],
            observed_id=row["observed_id"],
            observation_id=observation_id,
            reason=reason,
            derivation=row["derivation"],
            producer=ctx.producer,
        )
        return await commit(ctx, [event])
