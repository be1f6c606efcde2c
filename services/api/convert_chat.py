"""Chat and ChatStream: requests to the dialectic loop's, its results and stream events to protos."""

from __future__ import annotations

from peerlog.v1 import dialectic_pb2
from services.api import validation as v
from services.api.convert import as_of, json_object
from services.dialectic import response_format
from services.dialectic.loop import ChatRequest, ChatResult, DiscardText, TextDelta, ToolUsed
from services.dialectic.prompt import PROMPT_VERSION

# unspecified means low; an unknown number passes through as itself, for the level check to refuse
_LEVEL_NAMES = {
    dialectic_pb2.REASONING_LEVEL_UNSPECIFIED: "low",
    dialectic_pb2.REASONING_LEVEL_MINIMAL: "minimal",
    dialectic_pb2.REASONING_LEVEL_LOW: "low",
    dialectic_pb2.REASONING_LEVEL_MEDIUM: "medium",
    dialectic_pb2.REASONING_LEVEL_HIGH: "high",
    dialectic_pb2.REASONING_LEVEL_MAX: "max",
}


def chat_request(r: dialectic_pb2.ChatRequest) -> ChatRequest:
    level = _LEVEL_NAMES.get(r.reasoning_level, str(r.reasoning_level))
    fmt = r.response_format
    obj = None
    if fmt.HasField("json_schema_object"):
        obj = json_object(
            fmt.json_schema_object, "response_format.json_schema_object", response_format.MAX_SCHEMA_BYTES
        )
    schema = response_format.parse(fmt.json_schema if fmt.HasField("json_schema") else None, obj)
    return ChatRequest(
        r.workspace_id,
        r.observer_id,
        r.target_id or r.observer_id,
        r.query,
        r.session_id,
        level,
        schema,
        as_of=as_of(r),
        scope_id=r.scope_id,
        perspective_id=r.perspective_peer_id,
        zone=v.time_zone("time_zone", r.time_zone),
    )


def chat_response(result: ChatResult) -> dialectic_pb2.ChatResponse:
    return dialectic_pb2.ChatResponse(
        answer=result.answer,
        cited_observation_ids=result.observation_ids,
        cited_message_ids=result.message_ids,
        tool_rounds=result.tool_rounds,
        model=result.model,
        abstained=result.abstained,
        prompt_version=PROMPT_VERSION,
    )


def chat_chunk(event) -> dialectic_pb2.ChatChunk:
    if isinstance(event, TextDelta):
        return dialectic_pb2.ChatChunk(text=event.text)
    if isinstance(event, ToolUsed):
        return dialectic_pb2.ChatChunk(
            tool=dialectic_pb2.ToolProgress(
                round=event.round, tool=event.name, arguments=event.arguments, results=event.hits
            )
        )
    if isinstance(event, DiscardText):
        return dialectic_pb2.ChatChunk(discard_text=True)
    return dialectic_pb2.ChatChunk(done=chat_response(event))
