"""The demo's read step: a token-budgeted GetContext and a Chat answer over the scripted conversation."""

from __future__ import annotations

import grpc

from peerlog.v1 import context_pb2, dialectic_pb2
from services.cli.client import Client

QUESTION = "What should I keep in mind when suggesting restaurants and sights for Alice?"


async def show_context(api: Client, ws: str, session: str, say) -> None:
    out = await api.context.GetContext(
        context_pb2.GetContextRequest(
            workspace_id=ws,
            session_id=session,
            token_budget=400,
            observer_id="assistant",
            target_id="alice",
            search_query="food and sightseeing preferences",
            assistant_peer_id="assistant",
        )
    )
    t = out.tokens
    say(
        f"\nGetContext (budget 400 tokens, search 'food and sightseeing preferences'): {t.total} tokens = "
        f"representation {t.representation} + card {t.card} + summary {t.summary} ({out.summary_kind or 'none'}) "
        f"+ {len(out.messages)} recent messages {t.messages}"
    )
    say("  as chat messages:")
    for m in out.chat_messages:
        first = m.content.splitlines()[0] if m.content else ""
        say(f"    {m.role:>9}{f' ({m.name})' if m.name else ''}: {first[:110]}")


async def show_chat(api: Client, ws: str, session: str, say) -> None:
    say(f"\nChat (assistant about alice, level minimal: one tool round, then it answers): {QUESTION}")
    try:
        out = await api.dialectic.Chat(
            dialectic_pb2.ChatRequest(
                workspace_id=ws,
                observer_id="assistant",
                target_id="alice",
                query=QUESTION,
                session_id=session,
                reasoning_level=dialectic_pb2.REASONING_LEVEL_MINIMAL,
            ),
            timeout=600,
        )
    except grpc.aio.AioRpcError as err:
        say(f"  Chat failed: {err.code().name}: {err.details()}")
        return
    say(f"  answer ({out.model}, {out.tool_rounds} tool rounds{', abstained' if out.abstained else ''}):")
    for line in out.answer.strip().splitlines():
        say(f"    {line}")
    say(f"  cited observations {list(out.cited_observation_ids)}, messages {list(out.cited_message_ids)}")
