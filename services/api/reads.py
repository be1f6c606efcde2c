"""Read-side service functions: the pre-flight (preflight.py), then query the projections."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from types import MappingProxyType
from typing import Any

from sqlalchemy import RowMapping

from projections import message_reads, peer_reads, session_reads, workspace_reads
from services.api import auth
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.jsonb import json_bytes
from services.api.preflight import preflight
from services.errors import NotFound


@dataclass(frozen=True)
class Page:
    items: Sequence
    next_token: str


# membership periods a session's reply shows (convert.shown_memberships): 512-character ids make about 0.6 MB
MEMBERSHIPS_SHOWN = 1_000


@dataclass(frozen=True)
class SessionView:
    session: RowMapping
    memberships: Sequence[RowMapping]  # those a reply may show (MEMBERSHIPS_SHOWN), not necessarily every one
    periods: int  # how many membership periods the session has had


FIELD_BYTES = 16  # a field's tag and length, or a number, timestamp or boolean with its tag


def reply_bytes(item: Any) -> int:
    """An upper bound of `item`'s size in a reply: a row, a view of rows (dataclass), or a column's value.
    Strings count as UTF-8; JSON objects (metadata) as Structs, at their worst per byte of JSON."""
    if isinstance(item, str):
        return len(item.encode()) + FIELD_BYTES
    if isinstance(item, dict):  # a JSON column; rows are RowMappings, not dicts
        return v.STRUCT_BYTES_PER_JSON_BYTE * len(json_bytes(item)) + FIELD_BYTES
    if isinstance(item, Mapping):
        return sum(map(reply_bytes, item.values()))
    if is_dataclass(item):
        return sum(reply_bytes(getattr(item, f.name)) for f in fields(item))
    if isinstance(item, (list, tuple)):
        return sum(map(reply_bytes, item)) + FIELD_BYTES
    return FIELD_BYTES


def ids_bytes(count: int, octets: int) -> int:
    """What reply_bytes counts for a list of `count` strings of `octets` UTF-8 bytes together."""
    return octets + FIELD_BYTES * count + FIELD_BYTES


# a page of messages is cut by Postgres, as reply_bytes would count its rows (metadata may hold 64 KB each)
MESSAGE_BYTES = message_reads.ReplyBytes(v.MAX_PAGE_BYTES, FIELD_BYTES, v.STRUCT_BYTES_PER_JSON_BYTE)


def fitting(items: Sequence, budget: int = v.MAX_PAGE_BYTES, size=reply_bytes) -> Sequence:
    """The first of `items` whose replies fit `budget` bytes together, each `size(item)` bytes; at least one
    (an item alone fits any client: the request limits keep it well under 4 MiB)."""
    total = 0
    for n, item in enumerate(items):
        total += size(item)
        if total > budget and n:
            return items[:n]
    return items


def page(ctx: ApiDeps, scope: Sequence[str], items: Sequence, limit: int, cursor_of, read: int | None = None) -> Page:
    """`items` as a page, cut short where its reply would pass MAX_PAGE_BYTES; a full or cut page carries
    the token of its last item, signed for `scope` (see cursors.py). `read`: how many rows were read, when
    `items` are already the first of them that fit (sized before their parts were read)."""
    kept, read = fitting(items), len(items) if read is None else read
    return _page(ctx, scope, kept, read == limit or len(kept) < read, cursor_of)


def _page(ctx: ApiDeps, scope: Sequence[str], items: Sequence, more: bool, cursor_of) -> Page:
    return Page(items, ctx.cursors.encode(scope, str(cursor_of(items[-1]))) if more else "")


async def get_workspace(ctx: ApiDeps, workspace_id: str, token: str) -> RowMapping:
    return await preflight(ctx, token, workspace_id)


async def list_workspaces(
    ctx: ApiDeps, size: int, page_token: str, token: str, only: frozenset[str] | None = None
) -> Page:
    """A page of workspaces; only those in `only` (what the caller's token may see) unless it is None."""
    await preflight(ctx, token)
    limit, scope = v.page_size(size), ("ListWorkspaces",)
    after = ctx.cursors.decode_id(scope, page_token)
    async with ctx.engine.connect() as conn:
        rows = await workspace_reads.list_workspaces(conn, after, limit, only)
    return page(ctx, scope, rows, limit, lambda r: r["workspace_id"])


async def get_peer(ctx: ApiDeps, workspace_id: str, peer_id: str, token: str) -> RowMapping:
    await preflight(ctx, token, workspace_id, ids={"peer_id": peer_id})
    async with ctx.engine.connect() as conn:
        row = await peer_reads.peer(conn, workspace_id, peer_id)
    if row is None:
        raise NotFound(f"peer {peer_id!r} does not exist in workspace {workspace_id!r}")
    return row


async def list_peers(ctx: ApiDeps, workspace_id: str, size: int, page_token: str, token: str) -> Page:
    await preflight(ctx, token, workspace_id)
    limit, scope = v.page_size(size), ("ListPeers", workspace_id)
    after = ctx.cursors.decode_id(scope, page_token)
    async with ctx.engine.connect() as conn:
        rows = await peer_reads.list_peers(conn, workspace_id, after, limit)
    return page(ctx, scope, rows, limit, lambda r: r["peer_id"])


async def session_views(ctx: ApiDeps, workspace_id: str, rows: Sequence[RowMapping]) -> list[SessionView]:
    """The sessions with the membership periods their replies show, and how many they have had in all."""
    ids = [r["session_id"] for r in rows]
    async with ctx.engine.connect() as conn:
        shown = await session_reads.shown_memberships_of(conn, workspace_id, ids, MEMBERSHIPS_SHOWN)
        counts = await session_reads.membership_counts(conn, workspace_id, ids)
    return [SessionView(r, shown[r["session_id"]], counts[r["session_id"]]) for r in rows]


async def listed_views(ctx: ApiDeps, workspace_id: str, rows: Sequence[RowMapping]) -> list[SessionView]:
    """The listed sessions as the caller's token may see them: whole to a workspace token, and in the
    sessions a narrow one names; any other only as its peers saw it (`_as_seen`). A peer's token lists
    every session the peer was ever in, left ones too, where GetSession would need the session's scope."""
    narrow = auth.narrow_view(workspace_id)
    if narrow is None:
        return await session_views(ctx, workspace_id, rows)
    whole = await session_views(ctx, workspace_id, [r for r in rows if r["session_id"] in narrow.sessions])
    seen = await _seen_views(
        ctx, workspace_id, [r for r in rows if r["session_id"] not in narrow.sessions], narrow.peers
    )
    by_id = {view.session["session_id"]: view for view in whole + seen}
    return [by_id[r["session_id"]] for r in rows]


async def _seen_views(
    ctx: ApiDeps, workspace_id: str, rows: Sequence[RowMapping], peers: frozenset[str]
) -> list[SessionView]:
    # every period of `peers` is read (not only those shown): the turns they saw are counted from all of them
    async with ctx.engine.connect() as conn:
        own = await session_reads.memberships_of(conn, workspace_id, [r["session_id"] for r in rows], peers)
    return [_as_seen(r, own[r["session_id"]]) for r in rows]


def _as_seen(session: RowMapping, own: Sequence[RowMapping]) -> SessionView:
    """The session without its metadata or others' membership periods (`own`: those of the token's peers),
    and counting only the turns those peers saw while members (message_reads.seen_while_member's rule)."""
    row = {**session, "metadata": {}, "message_count": seen_turns(own, session["message_count"])}
    return SessionView(MappingProxyType(row), own, len(own))  # a row, not a JSON column (reply_bytes tells them apart)


def seen_turns(periods: Sequence[Mapping], last_seq: int) -> int:
    """How many of a session's turns (seq 1 to `last_seq`, one each) fall in `periods`: after a join, up
    to its leave. Counted from the periods, not by reading each turn: a page of sessions read every message
    of each (0.7-1 s for 1,000 sessions of 1,000 turns)."""
    spans = sorted((p["joined_after_seq"], min(_or(p["left_after_seq"], last_seq), last_seq)) for p in periods)
    count = reached = 0
    for after, until in spans:
        start = max(after, reached)
        if until > start:
            count, reached = count + until - start, until
    return count


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


async def get_session(ctx: ApiDeps, workspace_id: str, session_id: str, token: str) -> SessionView:
    row = await preflight(ctx, token, workspace_id, session_id=session_id)
    return (await session_views(ctx, workspace_id, [row]))[0]


async def list_sessions(ctx: ApiDeps, workspace_id: str, member: str, size: int, page_token: str, token: str) -> Page:
    # a peer named that does not exist is NOT_FOUND, as everywhere else, not an empty list
    await preflight(ctx, token, workspace_id, peers={"peer_id": member} if member else None)
    limit, scope = v.page_size(size), ("ListSessions", workspace_id, member)
    after = ctx.cursors.decode_id(scope, page_token)
    async with ctx.engine.connect() as conn:
        rows = await session_reads.list_sessions(conn, workspace_id, member, after, limit)
    views = await listed_views(ctx, workspace_id, rows)  # memberships count towards the page's bytes
    return page(ctx, scope, views, limit, lambda view: view.session["session_id"])


async def get_message(ctx: ApiDeps, workspace_id: str, message_id: str, token: str) -> RowMapping:
    await preflight(ctx, token, workspace_id, ids={"message_id": message_id})
    async with ctx.engine.connect() as conn:
        row = await message_reads.message(conn, workspace_id, message_id)
    if row is None:
        raise NotFound(f"message {message_id!r} does not exist in workspace {workspace_id!r}")
    return row


async def list_messages(
    ctx: ApiDeps,
    workspace_id: str,
    session_id: str,
    size: int,
    page_token: str,
    reverse: bool,
    token: str,
) -> Page:
    await preflight(ctx, token, workspace_id, session_id=session_id)
    limit, scope = v.page_size(size), ("ListMessages", workspace_id, session_id, str(reverse))
    after = ctx.cursors.decode_seq(scope, page_token)
    async with ctx.engine.connect() as conn:
        listed = await message_reads.message_page(conn, workspace_id, session_id, after, limit, reverse, MESSAGE_BYTES)
    more = listed.cut or len(listed.rows) == limit
    return _page(ctx, scope, listed.rows, more, lambda r: r["seq"])


async def get_session_summaries(ctx: ApiDeps, workspace_id: str, session_id: str, token: str) -> dict[str, RowMapping]:
    """The session's latest summary of each kind that exists, by kind ("short", "long")."""
    await preflight(ctx, token, workspace_id, session_id=session_id)
    async with ctx.engine.connect() as conn:
        return await session_reads.latest_summaries(conn, workspace_id, session_id)
