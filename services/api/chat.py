"""Chat and ChatStream: check the request against the projections, then hand it to the dialectic agent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import jsonschema

from services.api import validation as v
from services.api.context import ApiContext
from services.api.writes import require_scope
from services.config import LEVELS
from services.dialectic.agent import ChatEvent, ChatRequest, ChatResult
from services.errors import InvalidArgument, Unavailable

MAX_QUERY_CHARS = 10_000


def response_schema(text: str | None, obj: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The response_format's JSON schema (text or object), checked against its metaschema; None if absent."""
    if text is None and obj is None:
        return None
    schema: Any = obj
    if text is not None:
        try:
            schema = json.loads(text)
        except ValueError as error:
            raise InvalidArgument(f"response_format.json_schema is not JSON: {error}") from None
    if not isinstance(schema, dict):
        raise InvalidArgument("response_format must be a JSON schema object")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as error:
        raise InvalidArgument(f"response_format is not a valid JSON schema: {error.message}") from None
    return schema


async def _checked(ctx: ApiContext, r: ChatRequest, token: str) -> ChatRequest:
    if ctx.dialectic is None:
        raise Unavailable("Chat is not configured on this server")
    await ctx.freshness.wait(token)
    v.check_text("query", r.query, MAX_QUERY_CHARS)
    if r.level not in LEVELS:
        raise InvalidArgument(f"reasoning_level {r.level!r} is not one of {', '.join(LEVELS)}")
    await require_scope(ctx, r.workspace_id, [r.session_id] if r.session_id else [],
                        observer_id=r.observer_id, target_id=r.target_id)
    return r


async def chat(ctx: ApiContext, r: ChatRequest, token: str, deadline_s: float | None) -> ChatResult:
    """The answer to a question about a peer."""
    return await ctx.dialectic.chat(await _checked(ctx, r, token), deadline_s)


async def chat_stream(ctx: ApiContext, r: ChatRequest, token: str, deadline_s: float | None) -> AsyncIterator[ChatEvent]:
    """The same, as tool progress and text pieces, ending with the ChatResult."""
    async for event in ctx.dialectic.events(await _checked(ctx, r, token), deadline_s):
        yield event
