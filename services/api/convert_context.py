"""GetContext and GetRepresentation: requests to queries, packed results to protos."""

from __future__ import annotations

from peerlog.v1 import context_pb2
from services.api import context_reads
from services.api import validation as v
from services.api.convert import as_of, ts
from services.api.packing import render_relevant, render_representation


def _query(r, **only_context) -> context_reads.ContextQuery:
    """The fields GetContextRequest and GetRepresentationRequest share; `only_context`: GetContext's own."""
    v.check_text("search_query", r.search_query, v.MAX_SEARCH_QUERY_CHARS, required=False)
    return context_reads.ContextQuery(
        workspace_id=r.workspace_id,
        observer_id=r.observer_id,
        target_id=r.target_id,
        search_query=r.search_query,
        search_top_k=r.search_top_k,
        search_max_distance=r.search_max_distance,
        include_most_reinforced=r.include_most_reinforced if r.HasField("include_most_reinforced") else True,
        max_observations=r.max_observations,
        session_ids=tuple(r.session_ids),
        as_of=as_of(r),
        scope_id=r.scope_id,
        **only_context,
    )


def context_query(r) -> context_reads.ContextQuery:
    return _query(
        r,
        session_id=r.session_id,
        token_budget=r.token_budget,
        include_summary=r.include_summary if r.HasField("include_summary") else True,
        assistant_id=r.assistant_peer_id,
        perspective_id=r.perspective_peer_id,
        zone=v.time_zone("time_zone", r.time_zone),
    )


def _chat(packed, assistant: str) -> list:
    relevant = render_relevant(packed.relevant)
    out = [
        context_pb2.ChatMessage(role="system", content=text)
        for text in (packed.representation, "\n".join(packed.card), packed.summary, relevant)
        if text
    ]
    for m in packed.messages:
        role = "assistant" if m.peer_id == assistant else "user"
        out.append(context_pb2.ChatMessage(role=role, content=m.content, name=m.peer_id))
    return out


def context_response(packed, assistant: str) -> context_pb2.GetContextResponse:
    t = packed.tokens
    return context_pb2.GetContextResponse(
        observations=[context_observation(o) for o in packed.observations],
        representation=packed.representation,
        peer_card=list(packed.card),
        summary_kind=packed.summary_kind,
        summary=packed.summary,
        messages=[
            context_pb2.ContextMessage(
                message_id=m.message_id, peer_id=m.peer_id, content=m.content, author_name=m.author
            )
            for m in packed.messages
        ],
        tokens=context_pb2.TokenCounts(
            representation=t["representation"],
            card=t["card"],
            summary=t["summary"],
            messages=t["messages"],
            total=t["total"],
            relevant_messages=t["relevant_messages"],
        ),
        chat_messages=_chat(packed, assistant) if assistant else [],
        relevant_messages=[_relevant(r) for r in packed.relevant],
    )


def _relevant(r) -> context_pb2.RelevantMessage:
    return context_pb2.RelevantMessage(
        message_id=r.message_id,
        peer_id=r.peer_id,
        session_id=r.session_id,
        content=r.content,
        created_at=ts(r.created_at),
        score=r.score,
        author_name=r.author,
    )


def representation_query(r) -> context_reads.ContextQuery:
    return _query(r, session_id="")


def context_observation(o) -> context_pb2.ContextObservation:
    return context_pb2.ContextObservation(
        observation_id=o.observation_id,
        level=o.level,
        content=o.content,
        created_at=ts(o.created_key[0]),
        session_id=o.session_id,
        times_derived=o.times_derived,
        confidence=o.confidence,
        pattern_type=o.pattern_type,
        premises=[
            context_pb2.ContextPremise(observation_id=p.observation_id, level=p.level, content=p.content)
            for p in o.premises
        ],
    )


def representation_response(observations, truncated: bool = False) -> context_pb2.GetRepresentationResponse:
    return context_pb2.GetRepresentationResponse(
        observations=[context_observation(o) for o in observations],
        markdown=render_representation(observations),
        truncated=truncated,
    )
