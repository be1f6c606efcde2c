"""A scope's sessions now (scope_members) on real Kafka and Postgres: reads of the present cost what the scope
holds, not its whole add/remove history; the handlers keep the table through repeats; a schema from before
the table gets it filled from the history.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, event, text

from peerlog.v1 import scopes_pb2, scopes_pb2_grpc, workspaces_pb2
from projections.db import create_schema, sync_engine
from projections.scope_handlers import scope_created, scope_sessions_added, scope_sessions_removed
from services.cli.client import Client
from services.events import ProducerInfo, ScopeCreated, ScopeSessionsAdded, ScopeSessionsRemoved

API = ProducerInfo(component="api", version="0")
# remove/add cycles written straight into the history: what some 10,000 API calls leave behind
CYCLES = 10_000


@contextmanager
def statements() -> Iterator[list[str]]:
    """The SQL every engine of this process runs meanwhile (the API's and the projector's)."""
    seen: list[str] = []

    def note(_conn, _cursor, statement, *_):
        seen.append(statement)

    event.listen(Engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", note)


def _long_history(settings, scope_id: str, session_ids: list[str]) -> None:
    """CYCLES remove-then-add pairs of `session_ids` after the scope's real changes, ending where it is."""
    schema = f'"{settings.database.schema_name}"'
    engine = sync_engine(settings.database)
    with engine.begin() as conn:
        last = conn.execute(text(f"SELECT max(seq) FROM {schema}.scope_changes WHERE scope_id = :s"), {"s": scope_id})
        conn.execute(
            text(
                f"INSERT INTO {schema}.scope_changes "
                "(event_id, workspace_id, scope_id, session_id, added, seq, recorded_at) "
                "SELECT 'cycle-' || g, 'w', :scope, s, g % 2 = 0, :last + g, now() "
                "FROM generate_series(1, :n) g, unnest(CAST(:sessions AS text[])) s"
            ),
            {"scope": scope_id, "last": last.scalar_one(), "n": 2 * CYCLES, "sessions": session_ids},
        )
        conn.execute(text(f"ANALYZE {schema}.scope_changes"))
    engine.dispose()


async def test_a_scoped_read_costs_the_same_after_a_long_add_remove_history(channel, settings):
    c = Client(channel)
    await c.setup_conversation("w", "s0", peers=("alice", "bob"))
    for s in ("s1", "s2", "s3"):
        await c.session("w", s, members=("alice", "bob"))
    for s in ("s0", "s1", "s2", "s3"):
        sent = await c.add("w", s, [("bob", f"I keep bees in {s}")])
        await c.list_messages("w", s, sent.consistency_token)  # searchable before the search
    scopes = scopes_pb2_grpc.ScopeServiceStub(channel)
    await scopes.CreateScope(scopes_pb2.CreateScopeRequest(workspace_id="w", scope_id="win", session_ids=["s0", "s1"]))
    await scopes.RemoveScopeSessions(
        scopes_pb2.RemoveScopeSessionsRequest(workspace_id="w", scope_id="win", session_ids=["s0"])
    )
    added = await scopes.AddScopeSessions(
        scopes_pb2.AddScopeSessionsRequest(workspace_id="w", scope_id="win", session_ids=["s2"])
    )
    assert list(added.scope.session_ids) == ["s1", "s2"]
    _long_history(settings, "win", ["s1", "s2"])

    with statements() as seen:
        got = await scopes.GetScope(scopes_pb2.GetScopeRequest(workspace_id="w", scope_id="win"))
        listed = await scopes.ListScopes(scopes_pb2.ListScopesRequest(workspace_id="w"))
        found = await c.workspaces.SearchMessages(
            workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="w", query="bees", scope_id="win")
        )
    assert list(got.session_ids) == ["s1", "s2"] and list(listed.scopes[0].session_ids) == ["s1", "s2"]
    assert {r.message.session_id for r in found.results} == {"s1", "s2"}
    # the present is read from the scope's members: none of the 40,000 history rows is looked at
    assert not [s for s in seen if "scope_changes" in s], [s for s in seen if "scope_changes" in s]
    assert any("scope_members" in s for s in seen)
    # a read as of a time still takes the history, as it stood
    at = await scopes.GetScope(scopes_pb2.GetScopeRequest(workspace_id="w", scope_id="win", as_of=got.created_at))
    assert list(at.session_ids) == ["s0", "s1"]


def _members(engine, schema: str, scope_id: str, workspace_id: str = "w") -> list[str]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                f'SELECT session_id FROM "{schema}".scope_members WHERE workspace_id = :w AND scope_id = :s '
                "ORDER BY session_id"
            ),
            {"w": workspace_id, "s": scope_id},
        )
        return list(rows.scalars())


def test_scope_members_follow_the_events_and_a_repeat_changes_nothing(settings):
    engine, schema = sync_engine(settings.database), settings.database.schema_name
    create_schema(engine, schema)
    created = ScopeCreated(workspace_id="w", scope_id="x", session_ids=("a", "b"), producer=API)
    removed = ScopeSessionsRemoved(workspace_id="w", scope_id="x", session_ids=("a",), producer=API)
    added = ScopeSessionsAdded(workspace_id="w", scope_id="x", session_ids=("c", "a"), producer=API)
    removed_again = ScopeSessionsRemoved(workspace_id="w", scope_id="x", session_ids=("c",), producer=API)
    with engine.begin() as conn:
        scope_created(conn, [created])
        scope_sessions_removed(conn, [removed])
        scope_sessions_added(conn, [added])
        scope_sessions_removed(conn, [removed_again])
    assert _members(engine, schema, "x") == ["a", "b"]
    with engine.begin() as conn:  # the log read again from an earlier offset: every event a second time
        scope_created(conn, [created])
        scope_sessions_removed(conn, [removed])
        scope_sessions_added(conn, [added])
    assert _members(engine, schema, "x") == ["a", "b"]
    engine.dispose()


# (event_id, workspace_id, scope_id, session_id, added, seq): x in w ends with b and c, y with a, x in v with z
_OLD_HISTORY = [
    ("e1", "w", "x", "a", True, 1),
    ("e1", "w", "x", "b", True, 1),
    ("e2", "w", "x", "a", False, 2),
    ("e3", "w", "x", "c", True, 3),
    ("e4", "w", "y", "a", True, 1),
    ("e5", "v", "x", "z", True, 1),
]


def test_a_schema_from_before_scope_members_gets_them_from_its_history(settings):
    engine, schema = sync_engine(settings.database), settings.database.schema_name
    create_schema(engine, schema)
    with engine.begin() as conn:
        conn.execute(
            text(
                f'INSERT INTO "{schema}".scope_changes '
                "(event_id, workspace_id, scope_id, session_id, added, seq, recorded_at) "
                "VALUES (:e, :w, :s, :session, :added, :seq, now())"
            ),
            [dict(zip(("e", "w", "s", "session", "added", "seq"), row)) for row in _OLD_HISTORY],
        )
        conn.execute(text(f'DROP TABLE "{schema}".scope_members'))  # as a version before it left the schema
    create_schema(engine, schema)
    assert _members(engine, schema, "x") == ["b", "c"] and _members(engine, schema, "y") == ["a"]
    assert _members(engine, schema, "x", workspace_id="v") == ["z"]
    with engine.begin() as conn:
        conn.execute(text(f"DELETE FROM \"{schema}\".scope_members WHERE session_id = 'b'"))
    create_schema(engine, schema)  # once: at a later start the table is the projector's alone
    assert _members(engine, schema, "x") == ["c"]
    engine.dispose()
