"""Chat and ChatStream: check the request against the projections, then hand it to the dialectic tool loop."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace

from projections import configurations
from services.api import auth
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.guards import require_scope
from services.api.preflight import preflight
from services.api.scopes import recall_sessions
from services.api.slots import Slots, per_workspace
from services.dialectic import response_format
from services.dialectic.loop import ChatEvent, ChatRequest, ChatResult
from services.dialectic.settings import LEVELS
from services.errors import InvalidArgument, Unavailable
from services.events import resolve
from services.llm.tokens import count_tokens

MAX_QUERY_CHARS = 10_000


async def _checked(ctx: ApiDeps, r: ChatRequest, token: str) -> ChatRequest:
    if ctx.dialectic is None:
        raise Unavailable("Chat is not configured on this server")
    await preflight(ctx, token)
    v.check_text("query", r.query, MAX_QUERY_CHARS)
    if r.level not in LEVELS:
        raise InvalidArgument(f"reasoning_level {r.level!r} is not one of {', '.join(LEVELS)}")
    if r.response_schema is not None:  # metaschema checks can take a while: keep the event loop free
        await response_format.checked(r.response_schema)
    # counting a 64 KB schema's tokens takes 4-37 ms: off the event loop too
    await response_format.on_own_threads(_check_asked_tokens, r, ctx.dialectic.settings.token_budget)
    perspective = {"perspective_peer_id": r.perspective_id} if r.perspective_id else {}
    await require_scope(
        ctx,
        r.workspace_id,
        [r.session_id] if r.session_id else [],
        observer_id=r.observer_id,
        target_id=r.target_id,
        **perspective,
    )
    return r


def _check_asked_tokens(r: ChatRequest, budget: int) -> None:
    """The caller's part of the prompt, its query and its answer schema, within a quarter of the token budget.
    The budget only withdraws tools: the first call is sent whatever its size, and a repair sends it again. By
    characters alone, 10,000 emoji were 30,000 tokens, beside a schema of 64 KB."""
    limit = budget // 4
    schema = json.dumps(r.response_schema, separators=(",", ":")) if r.response_schema is not None else ""
    asked = count_tokens(r.query) + (count_tokens(schema) if schema else 0)
    if asked > limit:
        raise InvalidArgument(
            f"query and response_format take {asked:,} tokens together; at most {limit:,} are allowed "
            "(a quarter of PEERLOG_DIALECTIC_TOKEN_BUDGET): ask more briefly"
        )


async def _prepared(ctx: ApiDeps, r: ChatRequest, token: str) -> ChatRequest:
    """The checked request with the dialectic instructions its workspace and session configure, and its
    scope resolved into the sessions it may recall (as they stood at `as_of`)."""
    r = await _checked(ctx, r, token)
    async with ctx.engine.connect() as conn:
        levels = await configurations.levels(conn, r.workspace_id, r.session_id, r.as_of)
        sessions = await recall_sessions(conn, r.workspace_id, r.scope_id, (), r.as_of)
    instructions = resolve(ctx.configuration, *levels)["dialectic_instructions"]
    # its tools' searches rank without the workspace's statistics under a narrow token (MessageSearch.narrow)
    narrow = auth.narrow_view(r.workspace_id) is not None
    return replace(r, instructions=instructions, sessions=sessions, narrow=narrow)


def running_chats(most: int) -> Slots:
    """The Chat calls one workspace may run at once on this process."""
    return per_workspace(
        most,
        "Chat calls running",
        "PEERLOG_API_CHATS_PER_WORKSPACE",
        "retry once one has finished, or raise the setting",
    )


async def chat(ctx: ApiDeps, r: ChatRequest, token: str, deadline_s: float | None) -> ChatResult:
    """The answer to a question about a peer."""
    return await ctx.dialectic.chat(await _prepared(ctx, r, token), deadline_s)


async def chat_stream(ctx: ApiDeps, r: ChatRequest, token: str, deadline_s: float | None) -> AsyncIterator[ChatEvent]:
    """The same, as tool progress and text pieces, ending with the ChatResult."""
    async for event in ctx.dialectic.events(await _prepared(ctx, r, token), deadline_s):
        yield event
