"""Session and scope replies read only what they show: not every past membership period, not every session
of scopes that do not fit the page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import insert, select

from peerlog.v1 import common_pb2, scopes_pb2, sessions_pb2
from projections.db import sync_engine
from projections.schema import memberships, scope_members, scopes
from services.api import convert
from services.cli.client import Client
from tests.support.sql_rows import rows_read

PAST = 3 * convert.MEMBERSHIPS_SHOWN


def _add_past_periods(settings, peer_id: str, n: int) -> list:
    """`n` join/leave pairs of `peer_id` in session s, as AddMembers/RemoveMembers would have projected them;
    every period of the session afterwards, in join order."""
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    engine = sync_engine(settings.database)
    with engine.begin() as conn:
        conn.execute(
            insert(memberships),
            [
                {
                    "joined_event_id": f"j{i:07d}",
                    "workspace_id": "w",
                    "session_id": "s",
                    "peer_id": peer_id,
                    "joined_at": t0 + timedelta(seconds=i),
                    "left_at": t0 + timedelta(seconds=i, microseconds=1),
                    "left_event_id": f"l{i:07d}",
                    "joined_after_seq": 0,
                    "left_after_seq": 0,
                }
                for i in range(n)
            ],
        )
        m = memberships.c
        order = (m.joined_at, m.joined_event_id)
        periods = conn.execute(select(memberships).where(m.session_id == "s").order_by(*order)).mappings().all()
    engine.dispose()
    return periods


def _shown(periods) -> list[tuple[str, bool]]:
    return [(p["peer_id"], p["left_at"] is not None) for p in periods]


async def test_get_session_reads_only_the_periods_it_shows(channel, settings):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.peer("w", "carol")
    periods = _add_past_periods(settings, "dave", PAST)
    expected = _shown(convert.shown_memberships(periods, convert.MEMBERSHIPS_SHOWN))

    with rows_read({"joined_event_id", "peer_id"}) as read:
        got = await c.sessions.GetSession(sessions_pb2.GetSessionRequest(workspace_id="w", session_id="s"))
    assert [(m.peer_id, m.HasField("left_at")) for m in got.memberships] == expected  # the reply is as before
    assert got.membership_periods == PAST + 2
    assert sum(read) <= convert.MEMBERSHIPS_SHOWN  # not the 3,000 past periods

    add = sessions_pb2.AddMembersRequest(
        workspace_id="w", session_id="s", members=[sessions_pb2.MemberSpec(peer_id="carol")]
    )
    with rows_read({"joined_event_id", "peer_id"}) as read:
        added = (await c.sessions.AddMembers(add)).session
    assert added.membership_periods == PAST + 3 and len(added.memberships) == convert.MEMBERSHIPS_SHOWN
    assert [m.peer_id for m in added.memberships if not m.HasField("left_at")] == ["alice", "bob", "carol"]
    assert sum(read) <= convert.MEMBERSHIPS_SHOWN + 10  # the write's own checks read the current members


SCOPES, SESSIONS_EACH = 20, 999
LONG_ID = "x" * 500  # 999 ids of 500 characters: about half a megabyte a scope, a few scopes a page


async def test_list_scopes_reads_only_the_sessions_of_the_scopes_on_its_page(channel, settings):
    c = Client(channel)
    await c.workspace("w")
    engine = sync_engine(settings.database)
    with engine.begin() as conn:
        t0 = datetime(2024, 1, 1, tzinfo=UTC)
        conn.execute(
            insert(scopes),
            [
                {"workspace_id": "w", "scope_id": f"sc{k:02d}", "name": "n", "created_at": t0, "event_id": f"e{k}"}
                for k in range(SCOPES)
            ],
        )
        for k in range(SCOPES):
            rows = [
                {"workspace_id": "w", "scope_id": f"sc{k:02d}", "session_id": f"{LONG_ID}{i:04d}"}
                for i in range(SESSIONS_EACH)
            ]
            conn.execute(insert(scope_members), rows)
    engine.dispose()

    request = scopes_pb2.ListScopesRequest(workspace_id="w", page=common_pb2.PageRequest(page_size=1000))
    with rows_read({"scope_id", "session_id"}) as read:
        first = await c.scopes.ListScopes(request)
    on_page = len(first.scopes)
    assert 1 < on_page < SCOPES and first.next_page_token  # cut by bytes, with a token to go on
    assert all(len(s.session_ids) == SESSIONS_EACH for s in first.scopes)
    assert sum(read) == on_page * SESSIONS_EACH  # not the sessions of all 20 scopes

    request.page.page_token = first.next_page_token
    second = await c.scopes.ListScopes(request)
    assert second.scopes[0].scope_id == f"sc{on_page:02d}"
