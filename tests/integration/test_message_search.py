"""Hybrid message search: the embedder's vectors reach the projection, and SearchMessages fuses
semantic and full-text rankings under every filter, at workspace, session and peer level."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import grpc
import numpy as np
import pytest
from google.protobuf import timestamp_pb2
from sqlalchemy import func, select

from peerlog.v1 import messages_pb2, peers_pb2, sessions_pb2, workspaces_pb2
from projections import message_search, search_path
from projections.apply import Record, apply_batch
from projections.db import create_schema, sync_engine
from projections.inserts import BULK_ROWS
from projections.rebuild import rebuild
from projections.schema import messages, pending_message_embeddings
from services.bus.producer import EventLog
from services.cli.client import Client
from services.embedder.policy import previous_turn, text_to_embed
from services.events import EmbeddedMessage, MessageAppended, MessagesEmbedded, SessionCreated, WorkspaceCreated, encode
from services.llm.embeddings import LOCAL_MODEL, make_embedder
from tests.integration.test_projector import P, msg
from tests.support.wait import eventually

FILLER = [
    f"{what} {when}"
    for what in (
        "The weather was mild",
        "We cooked lentil soup",
        "The band played jazz",
        "Taxes are due soon",
        "The printer jammed again",
        "Tomatoes grew well",
    )
    for when in (
        "on monday",
        "on tuesday",
        "last week",
        "this morning",
        "at noon",
        "after lunch",
        "before dinner",
        "in spring",
        "in autumn",
        "yesterday",
    )
]


def embedded_count(settings) -> int:
    engine = sync_engine(settings.database)
    try:
        with engine.connect() as conn:
            return conn.scalar(select(func.count()).select_from(messages).where(messages.c.embedding.is_not(None)))
    finally:
        engine.dispose()


def dated(turns, day: int = 12) -> list[messages_pb2.NewMessage]:
    """(peer, content) turns sent on one fixed day: a message is embedded with its date, so a test of
    semantic ranks whose turns were stamped "now" could pass one day and fail the next."""
    return [messages_pb2.NewMessage(peer_id=p, content=t, created_at=ts(day)) for p, t in turns]


def ts(day: int) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(datetime(2026, 1, day, tzinfo=UTC))
    return out


async def search_ws(c: Client, query: str, **kw):
    return await c.workspaces.SearchMessages(
        workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id=kw.pop("workspace_id", "w"), query=query, **kw)
    )


async def assert_only_author_lifted(c: Client, plain: str, naming: str, author: str, **kw) -> None:
    """`naming` is `plain` plus a name of `author`: with the same vector and terms, every hit's score moves
    by AUTHOR_BOOST if `author` wrote it and not at all otherwise."""
    from projections.message_ranking import AUTHOR_BOOST

    async def scores(query: str) -> dict[str, tuple[str, float]]:
        found = await search_ws(c, query, limit=4, **kw)
        return {r.message.content: (r.message.peer_id, r.score) for r in found.results}

    before, after = await scores(plain), await scores(naming)
    assert {t: s - before[t][1] for t, (_, s) in after.items()} == pytest.approx(
        {t: AUTHOR_BOOST if peer == author else 0.0 for t, (peer, _) in after.items()}, abs=1e-4
    )


def contents(response) -> list[str]:
    return [r.message.content for r in response.results]


@pytest.fixture
async def garden(channel, settings, start_worker):
    """s1: alice and bob from the start, carol joins after the first turn, bob leaves after the second;
    s2: alice and bob only. Every turn mentions the garden, with its own created_at day."""
    worker = start_worker("embedder")
    c = Client(channel)
    await c.workspace("w")
    for p in ("alice", "bob", "carol"):
        await c.peer("w", p)
    await c.session("w", "s1", members=["alice", "bob"])
    await c.session("w", "s2", members=["alice", "bob"])

    def turn(peer, text, day):
        return messages_pb2.NewMessage(peer_id=peer, content=text, created_at=ts(day))

    await c.add("w", "s1", [turn("alice", "garden 1: the roses need pruning", 1)])
    await c.session("w", "s1", members=["carol"])
    await c.add("w", "s1", [turn("bob", "garden 2: slugs ate the lettuce", 2)])
    await c.sessions.RemoveMembers(
        sessions_pb2.RemoveMembersRequest(workspace_id="w", session_id="s1", peer_ids=["bob"])
    )
    await c.add("w", "s1", [turn("alice", "garden 3: the pond froze over", 3)])
    token = (await c.add("w", "s2", [turn("bob", "garden 4: planted garlic for winter", 4)])).consistency_token
    eventually(lambda: embedded_count(settings) == 4, 60)
    return c, token, worker


async def test_messages_are_embedded_with_date_author_and_previous_turn_and_projected(settings, garden):
    engine = sync_engine(settings.database)
    m = messages.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(m.session_id, m.peer_id, m.content, m.created_at, m.embedding, m.embedding_model).order_by(
                m.session_id, m.seq
            )
        ).all()
    engine.dispose()
    texts, before = [], {}
    for r in rows:
        appended = MessageAppended(
            workspace_id="w",
            session_id=r.session_id,
            message_id="m",
            peer_id=r.peer_id,
            content=r.content,
            created_at=r.created_at,
            producer=P,
        )
        if r.content.startswith("garden 2"):
            before.pop(r.session_id)  # carol joined just before it: not embedded beside a turn she never saw
        texts.append(text_to_embed(appended, before.get(r.session_id)))
        before[r.session_id] = previous_turn(appended)
    assert texts[1] == "[2 January 2026] bob: garden 2: slugs ate the lettuce"
    assert (
        texts[2]
        == "[3 January 2026] alice: garden 3: the pond froze over (replying to bob: garden 2: slugs ate the lettuce)"
    )
    expected = make_embedder().embed_sync(texts)
    for row, vector in zip(rows, expected, strict=True):
        assert row.embedding_model == LOCAL_MODEL and len(row.embedding) == 384
        assert max(abs(a - b) for a, b in zip(row.embedding, vector)) < 1e-5


async def test_a_query_that_names_a_peer_puts_its_best_match_first_and_lifts_its_others(garden):
    c, _, _ = garden
    pond = "garden 3: the pond froze over"  # alice's: the best match for the words and the meaning
    slugs, garlic, roses = (
        "garden 2: slugs ate the lettuce",
        "garden 4: planted garlic for winter",
        "garden 1: the roses need pruning",
    )
    assert contents(await search_ws(c, "the garden pond froze over", limit=4))[0] == pond
    by_bob = contents(await search_ws(c, "what did bob do in the garden", limit=4))
    by_alice = contents(await search_ws(c, "what did alice do in the garden", limit=4))
    assert (by_bob[0], by_alice[0]) == (slugs, pond)
    # each peer's other message ranks higher when the query names its author than when it names the other
    assert by_bob.index(garlic) < by_alice.index(garlic)
    assert by_alice.index(roses) < by_bob.index(roses)
    # the lift is bounded (3 σ), so a match as exceptional as another peer's can stay above a named peer's
    # weaker one: test_naming_a_peer_only_lifts_its_messages_... measures the lift itself


async def test_a_query_that_names_a_day_lifts_the_messages_sent_that_day_and_no_other(garden):
    from projections.message_ranking import TIME_BOOST

    c, _, _ = garden

    async def scores(before_day: int) -> dict[str, float]:
        # "yesterday" is the day before the search's upper bound: the same words, a different day
        found = await search_ws(c, "what happened in the garden yesterday", limit=4, before=ts(before_day))
        return {r.message.content: r.score for r in found.results}

    on_the_4th, on_the_5th = await scores(5), await scores(6)  # garlic was planted on 4 January
    gained = {text: on_the_4th[text] - on_the_5th[text] for text in on_the_4th}
    lift = gained.pop("garden 4: planted garlic for winter")
    assert lift > 0 and lift == pytest.approx(TIME_BOOST, abs=1e-6)
    assert gained == pytest.approx(dict.fromkeys(gained, 0.0), abs=1e-6)


async def test_yesterday_is_the_askers_day_in_the_time_zone_it_names(garden):
    from projections.message_ranking import TIME_BOOST

    c, _, _ = garden
    evening = timestamp_pb2.Timestamp()
    evening.FromDatetime(datetime(2026, 1, 4, 20, 0, tzinfo=UTC))  # already 5 January, 05:00, in Tokyo

    async def scores(**kw) -> dict[str, float]:
        found = await search_ws(c, "what happened in the garden yesterday", limit=4, before=evening, **kw)
        return {r.message.content: r.score for r in found.results}

    utc, tokyo = await scores(), await scores(time_zone="Asia/Tokyo")
    garlic, pond = "garden 4: planted garlic for winter", "garden 3: the pond froze over"  # 4 and 3 January, 00:00 UTC
    # yesterday in UTC is the 3rd, in Tokyo the 4th, which began at 15:00 UTC on the 3rd: the pond froze
    # before it; each day named is lifted with the days after it (told later), so both lift the garlic
    assert utc[pond] - tokyo[pond] == pytest.approx(TIME_BOOST, abs=1e-6)
    assert tokyo[garlic] == pytest.approx(utc[garlic], abs=1e-6)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await scores(time_zone="Mars/Olympus_Mons")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "IANA name" in err.value.details()


@pytest.mark.parametrize("query", ["what did I plant yesterday", "last week", "Dec 25", "three days ago"])
async def test_a_time_named_just_before_the_latest_date_a_timestamp_holds_is_searched_not_failed(garden, query):
    c, _, _ = garden
    latest = timestamp_pb2.Timestamp()
    latest.FromDatetime(datetime(9999, 12, 31, 23, 59, tzinfo=UTC))
    found = await search_ws(c, f"garden {query}", limit=4, before=latest)
    assert len(found.results) == 4


async def test_a_long_query_weighs_only_its_rarest_terms(settings, garden):
    from projections.lexical_terms import query_terms
    from projections.message_ranking import QUERY_TERMS
    from projections.search_shape import MessageSearch, params

    c, _, _ = garden
    words = [f"qu{i:03d}" for i in range(1_000)]  # each held by one message: rarer than "garden"
    await c.add("w", "s2", [messages_pb2.NewMessage(peer_id="alice", content=" ".join(words), created_at=ts(6))])
    eventually(lambda: embedded_count(settings) == 5, 60)
    query = "garden " + " ".join(reversed(words))
    terms, _ = query_terms()
    engine = sync_engine(settings.database)
    with engine.connect() as conn:
        kept = conn.execute(select(terms.c.lexeme), params(MessageSearch("w", query, None))).scalars().all()
    engine.dispose()
    # one match per term and row: a page of distinct words otherwise cost seconds on a large workspace
    assert sorted(kept) == words[:QUERY_TERMS]  # the rarest, then in lexeme order: not "garden", in four
    assert contents(await search_ws(c, query, limit=1)) == [" ".join(words)]


async def test_a_display_name_names_its_peer_by_its_words_of_two_characters_or_more(settings, garden):
    from google.protobuf import struct_pb2

    from projections.lexical_terms import named_peers

    c, _, _ = garden
    for peer_id, name in (("u-1", "C++ (Carol) [x]* Travel"), ("u-2", "Jo")):
        await c.peer("w", peer_id, metadata=struct_pb2.Struct(fields={"name": struct_pb2.Value(string_value=name)}))
    engine = sync_engine(settings.database)

    def named_by(query: str) -> set[str]:
        with engine.connect() as conn:
            return set(conn.execute(select(named_peers().c.peer_id), {"workspace_id": "w", "q": query}).scalars())

    try:
        eventually(lambda: named_by("Jo's travel plans") == {"u-1", "u-2"}, 30)  # two letters are a name
        assert named_by("the plan X") == named_by("vitamin C") == set()  # one letter names no one
    finally:
        engine.dispose()


async def test_naming_a_peer_only_lifts_its_messages_the_name_is_neither_embedded_nor_a_term(garden):
    c, _, _ = garden
    await assert_only_author_lifted(c, "garden pond", "Bob's garden pond", "bob")


async def test_a_message_matching_by_words_and_by_meaning_ranks_above_one_matching_only_by_meaning(
    channel, settings, start_worker
):
    start_worker("embedder")
    c = Client(channel)
    await c.setup_conversation("w", "s")
    both = "I put my car keys in the blue bowl by the door"
    meaning_only = "Where is the key fob for my vehicle?"
    words_only = "The car wash takes no keys, cards or coins"
    for i in range(0, len(FILLER), 20):
        await c.add("w", "s", dated(("alice", t) for t in FILLER[i : i + 20]))
    # filler between them: each is judged on its own words and meaning, not its neighbours'
    gap = [("alice", t) for t in FILLER[:3]]
    await c.add("w", "s", dated([("bob", both), *gap, ("alice", meaning_only), *gap, ("bob", words_only)]))
    eventually(lambda: embedded_count(settings) == len(FILLER) + 9, 90)

    found = contents(await search_ws(c, "car keys", limit=5))
    # the two holding both words lead (which of them first is the model's call: both are about car keys)
    assert set(found[:2]) == {both, words_only}
    # each list contributes what the other misses: full text alone never finds meaning_only (no "car")
    assert found.index(meaning_only) == 2
    exact = contents(await search_ws(c, "lentil soup monday", limit=3))
    assert exact[0] == "We cooked lentil soup on monday"


async def test_results_come_best_first_with_their_fused_scores(garden):
    c, token, _ = garden
    out = await search_ws(c, "garden pond", consistency={"consistency_token": token})
    assert out.results[0].message.content.startswith("garden 3")
    scores = [r.score for r in out.results]
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[-1]
    assert out.embedding_model == LOCAL_MODEL


async def test_a_question_naming_the_author_finds_the_authors_turns_though_no_text_holds_the_name(settings, garden):
    c, _, _ = garden
    # "bob" is in no message's text: his turns lead by the author lift alone
    found = await search_ws(c, "what did bob say", limit=4)
    assert [r.message.peer_id for r in found.results][:2] == ["bob", "bob"]
    # and the name is no full-text term: it would match again every turn by bob or that names him,
    # the shortest first ("Thanks bob!"), however little else it shares with the question
    assert await lexical_ids(settings, "what did bob say") == []


async def lexical_ids(settings, query: str) -> list[str]:
    from sqlalchemy.ext.asyncio import create_async_engine

    from projections.message_search import lexical
    from projections.search_shape import MessageSearch, Shape, params

    search = MessageSearch(workspace_id="w", query=query, vector=None, limit=10)
    engine = create_async_engine(settings.database.url).execution_options(
        schema_translate_map={None: settings.database.schema_name}
    )
    async with engine.connect() as conn:
        found = [r.message_id for r in await conn.execute(lexical(Shape.of(search)), params(search))]
    await engine.dispose()
    return found


async def test_a_query_word_that_looks_like_an_operator_is_matched_as_written(channel, settings):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    texts = ["The freezer showed -5 at dawn", "The freezer showed 5 at dawn", "It's O'Neil's \\ backslash day"]
    token = (await c.add("w", "s", [("alice", t) for t in texts])).consistency_token
    await search_ws(c, "warm-up", consistency={"consistency_token": token})
    ids = {
        r.message.content: r.message.message_id for r in (await search_ws(c, "freezer dawn o'neil", limit=10)).results
    }
    # '-5' is a lexeme of its own: read as an operator it meant "not 5" and found every other message
    assert await lexical_ids(settings, "what was -5") == [ids[texts[0]]]
    assert await lexical_ids(settings, "O'Neil's \\") == [ids[texts[2]]]


async def test_a_schema_from_before_the_lexical_table_gets_its_messages_indexed_at_start(settings, garden):
    from sqlalchemy import text

    from projections.db import create_schema
    from projections.schema import message_terms

    engine = sync_engine(settings.database)
    with engine.begin() as conn:
        conn.execute(text(f'DROP TABLE "{settings.database.schema_name}".message_terms'))
    create_schema(engine, settings.database.schema_name)
    create_schema(engine, settings.database.schema_name)  # once filled, starting again copies nothing
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(message_terms)) == 4
    engine.dispose()
    assert len(await lexical_ids(settings, "garden")) == 4


async def test_a_hit_carries_its_adjacent_turns_when_asked_and_only_those_its_perspective_saw(garden):
    c, token, _ = garden

    async def top(**kw):
        out = await search_ws(
            c, "slugs ate the lettuce", limit=1, session_ids=["s1"], consistency={"consistency_token": token}, **kw
        )
        hit = out.results[0]
        assert hit.message.content.startswith("garden 2")
        return [
            hit.previous.content if hit.HasField("previous") else None,
            hit.next.content if hit.HasField("next") else None,
        ]

    assert await top() == [None, None]  # only when asked: they cost a read and bytes
    assert await top(include_adjacent=True) == ["garden 1: the roses need pruning", "garden 3: the pond froze over"]
    # the author filter picks hits, not their context: alice's turns still frame bob's
    assert await top(include_adjacent=True, author_peer_ids=["bob"]) == [
        "garden 1: the roses need pruning",
        "garden 3: the pond froze over",
    ]
    # carol joined after garden 1: she never saw it, so it is no context of hers
    assert await top(include_adjacent=True, perspective_peer_id="carol") == [None, "garden 3: the pond froze over"]


# the semantic list of a search confined to sessions (a perspective, a session list) takes one of two
# paths by how many messages those sessions hold: compared one by one, or the HNSW graph walked
SEMANTIC_PATHS = pytest.mark.parametrize("exact_scan_factor", [1e9, 0.0], ids=["exact scan", "graph walk"])


@SEMANTIC_PATHS
async def test_each_filter_narrows_both_rankings(garden, monkeypatch, exact_scan_factor):
    monkeypatch.setattr(search_path, "EXACT_SCAN_FACTOR", exact_scan_factor)
    c, _, _ = garden

    async def days(**kw) -> set[int]:
        return {int(t.split(":")[0].split()[1]) for t in contents(await search_ws(c, "garden", limit=100, **kw))}

    assert await days() == {1, 2, 3, 4}
    assert await days(session_ids=["s2"]) == {4}
    assert await days(author_peer_ids=["bob"]) == {2, 4}
    assert await days(after=ts(2), before=ts(4)) == {2, 3}  # [after, before)
    assert await days(session_ids=["s1"], author_peer_ids=["alice"], after=ts(2)) == {3}


@SEMANTIC_PATHS
async def test_a_perspective_sees_only_what_was_sent_while_it_was_a_member(garden, monkeypatch, exact_scan_factor):
    monkeypatch.setattr(search_path, "EXACT_SCAN_FACTOR", exact_scan_factor)
    c, _, _ = garden

    async def days(peer: str, **kw) -> set[int]:
        found = contents(await search_ws(c, "garden", limit=100, perspective_peer_id=peer, **kw))
        return {int(t.split(":")[0].split()[1]) for t in found}

    assert await days("carol") == {2, 3}  # joined after turn 1; never in s2
    assert await days("bob") == {1, 2, 4}  # left before turn 3
    assert await days("alice") == {1, 2, 3, 4}


@pytest.mark.parametrize("whose", [{"perspective_peer_id": "bob"}, {}], ids=["an observer's", "the workspace's"])
async def test_a_search_over_more_sessions_than_the_exact_comparison_takes_walks_the_graph(garden, monkeypatch, whose):
    """Even when its sessions hold few messages: the comparison looks each session up (bob is in 2 here,
    the workspace has 2)."""
    monkeypatch.setattr(search_path, "EXACT_SCAN_FACTOR", 1e9)
    monkeypatch.setattr(search_path, "MAX_EXACT_SESSIONS", 1)
    c, _, _ = garden
    seen = {1, 2, 4} if whose else {1, 2, 3, 4}  # bob left before turn 3
    taken = []
    decide = message_search.walk_settings_and_path

    async def spy(conn, shape, values):
        exact, observed = await decide(conn, shape, values)
        taken.append(exact)
        return exact, observed

    monkeypatch.setattr(message_search, "walk_settings_and_path", spy)
    found = contents(await search_ws(c, "garden", limit=100, **whose))
    assert {int(t.split(":")[0].split()[1]) for t in found} == seen
    assert taken == [False]  # the graph walked
    monkeypatch.setattr(search_path, "MAX_EXACT_SESSIONS", 2)
    found = contents(await search_ws(c, "garden", limit=100, **whose))
    assert {int(t.split(":")[0].split()[1]) for t in found} == seen
    assert taken == [False, True]  # compared one by one


@SEMANTIC_PATHS
async def test_session_and_peer_level_search_share_the_filters(garden, monkeypatch, exact_scan_factor):
    monkeypatch.setattr(search_path, "EXACT_SCAN_FACTOR", exact_scan_factor)
    c, _, _ = garden
    in_s1 = await c.sessions.SearchMessages(
        sessions_pb2.SearchSessionMessagesRequest(workspace_id="w", session_id="s1", query="garden", limit=100)
    )
    assert sorted(contents(in_s1))[0].startswith("garden 1") and len(in_s1.results) == 3
    by_bob = await c.peers.SearchMessages(
        peers_pb2.SearchPeerMessagesRequest(workspace_id="w", peer_id="bob", query="garden", limit=100)
    )
    assert sorted(contents(by_bob)) == ["garden 2: slugs ate the lettuce", "garden 4: planted garlic for winter"]
    by_bob_for_carol = await c.peers.SearchMessages(
        peers_pb2.SearchPeerMessagesRequest(
            workspace_id="w", peer_id="bob", query="garden", perspective_peer_id="carol"
        )
    )
    assert contents(by_bob_for_carol) == ["garden 2: slugs ate the lettuce"]


@pytest.mark.parametrize(
    "request_kw, code, says",
    [
        (dict(query=""), grpc.StatusCode.INVALID_ARGUMENT, "query is empty"),
        (dict(query="x" * 10_001), grpc.StatusCode.INVALID_ARGUMENT, "limit is 10000"),
        (dict(query="garden", limit=101), grpc.StatusCode.INVALID_ARGUMENT, "limit 101"),
        (dict(query="garden", after=ts(3), before=ts(3)), grpc.StatusCode.INVALID_ARGUMENT, "must be earlier"),
        (dict(query="garden", session_ids=["bad id!"]), grpc.StatusCode.INVALID_ARGUMENT, "not a valid id"),
        (dict(query="garden", workspace_id="nowhere"), grpc.StatusCode.NOT_FOUND, "'nowhere' does not exist"),
        (dict(query="garden", session_ids=["s9"]), grpc.StatusCode.NOT_FOUND, "session 's9'"),
        (dict(query="garden", author_peer_ids=["ghost"]), grpc.StatusCode.NOT_FOUND, "'ghost'"),
        (dict(query="garden", perspective_peer_id="ghost"), grpc.StatusCode.NOT_FOUND, "perspective_peer_id 'ghost'"),
    ],
)
async def test_bad_search_input_gets_an_actionable_status(channel, request_kw, code, says):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await search_ws(c, **request_kw)
    assert err.value.code() == code and says in err.value.details(), err.value.details()


async def test_unknown_session_or_peer_at_their_own_level_is_not_found(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.sessions.SearchMessages(
            sessions_pb2.SearchSessionMessagesRequest(workspace_id="w", session_id="nope", query="x")
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "'nope'" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.peers.SearchMessages(peers_pb2.SearchPeerMessagesRequest(workspace_id="w", peer_id="nope", query="x"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "'nope'" in err.value.details()


def test_an_embedding_that_arrives_before_its_message_is_applied_when_the_message_lands(settings, projector):
    engine = sync_engine(settings.database)
    log = EventLog(settings.kafka)
    log.start()
    log.append_sync(
        [
            MessagesEmbedded(
                workspace_id="w",
                session_id="s1",
                embedding_model=LOCAL_MODEL,
                producer=P,
                messages=(EmbeddedMessage(message_id="m1", session_id="s1", vector=tuple([0.5] * 384)),),
            )
        ]
    )
    with engine.connect() as conn:
        eventually(lambda: conn.scalar(select(func.count()).select_from(pending_message_embeddings)) == 1)
    log.append_sync(
        [
            WorkspaceCreated(workspace_id="w", producer=P),
            SessionCreated(workspace_id="w", session_id="s1", producer=P),
            msg(1),
        ]
    )
    log.close()

    def landed():
        with engine.connect() as conn:
            return conn.execute(select(messages.c.embedding, messages.c.embedding_model)).first()

    row = eventually(landed)
    assert list(row.embedding) == [0.5] * 384 and row.embedding_model == LOCAL_MODEL
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(pending_message_embeddings)) == 0
    engine.dispose()


def test_many_vectors_ahead_of_their_messages_keep_the_newest_and_land_with_their_messages(settings):
    """More than BULK_ROWS waiting vectors in one batch (as a rebuild, which replays vectors first, applies
    them) go through the staged upsert: of two for one message the newer event wins whatever their order,
    and each message is then written with its vector."""
    engine = sync_engine(settings.database)
    create_schema(engine, settings.database.schema_name)
    n = BULK_ROWS + 20

    def embedded(i: int, value: float) -> MessagesEmbedded:
        return MessagesEmbedded(
            workspace_id="w",
            session_id="s1",
            embedding_model=LOCAL_MODEL,
            producer=P,
            messages=(EmbeddedMessage(message_id=f"m{i}", session_id="s1", vector=tuple([value] * 384)),),
        )

    older = [embedded(i, 0.25) for i in range(n)]
    newer = [embedded(i, 0.75) for i in range(0, n, 2)]  # UUIDv7 ids: made later, so newer
    batches = [
        [WorkspaceCreated(workspace_id="w", producer=P), SessionCreated(workspace_id="w", session_id="s1", producer=P)],
        [*newer, *older],
        [msg(i) for i in range(n)],
    ]
    offset = 0
    for events in batches:
        records = [Record("t", 0, offset + i, None, encode(e)) for i, e in enumerate(events)]
        offset += len(records)
        with engine.begin() as conn:
            assert apply_batch(conn, records).quarantined == 0
    with engine.connect() as conn:
        rows = conn.execute(select(messages.c.message_id, messages.c.embedding, messages.c.embedding_event_id))
        got = {m: (set(v), e) for m, v, e in rows}
        assert conn.scalar(select(func.count()).select_from(pending_message_embeddings)) == 0
    assert got == {
        f"m{i}": ({0.75}, newer[i // 2].event_id) if i % 2 == 0 else ({0.25}, older[i].event_id) for i in range(n)
    }
    engine.dispose()


def test_a_vector_applied_while_another_projector_inserts_its_message_lands_on_the_message(settings):
    """Two projector processes share the partitions: one applies the message (sessions topic) and, before it
    commits, the other applies its vector (message-embeddings topic). The second waits for the first, then
    sees the message: before, it could not see it, left the vector waiting in the pending table (where the
    message's insert had already looked) and the message never had a vector."""
    engine = sync_engine(settings.database)
    create_schema(engine, settings.database.schema_name)

    def records(topic: str, *events) -> list[Record]:
        return [Record(topic, 0, i, None, encode(e)) for i, e in enumerate(events)]

    with engine.begin() as conn:
        made = [
            WorkspaceCreated(workspace_id="w", producer=P),
            SessionCreated(workspace_id="w", session_id="s1", producer=P),
        ]
        apply_batch(conn, records("setup", *made))
    vector = MessagesEmbedded(
        workspace_id="w",
        session_id="s1",
        embedding_model=LOCAL_MODEL,
        producer=P,
        messages=(EmbeddedMessage(message_id="m1", session_id="s1", vector=tuple([0.5] * 384)),),
    )
    with engine.connect() as first, engine.connect() as second:
        first.begin()
        apply_batch(first, records("sessions", msg(1)))  # not committed yet
        second.begin()
        applying = threading.Thread(target=apply_batch, args=(second, records("embeddings", vector)))
        applying.start()
        applying.join(2)
        waited = applying.is_alive()
        first.commit()
        applying.join(30)
        second.commit()
    with engine.connect() as conn:
        assert conn.scalar(select(messages.c.embedding_model).where(messages.c.message_id == "m1")) == LOCAL_MODEL
        assert conn.scalar(select(func.count()).select_from(pending_message_embeddings)) == 0
    assert waited
    engine.dispose()


async def test_a_rebuild_reproduces_message_embeddings_without_the_embedder(settings, garden):
    c, _, worker = garden
    before = contents(await search_ws(c, "frozen pond"))
    worker.stop()  # the only thing that embeds messages: the rebuild can only replay what the log holds
    report = rebuild(settings, progress=lambda _: None)
    assert report.switched and set(report.differences.values()) == {0}, report.differences
    assert embedded_count(settings) == 4
    assert contents(await search_ws(c, "frozen pond")) == before


# the second query names bob: his messages are lifted, and "bob" is no term of the full-text list. The
# third and fourth count "garden" (in all four turns) as common: the first selects by its rare terms only,
# the last, all of whose terms are common, needs both. The fifth asks when, after a fifth turn that says
# when ("last week") joined the garden's four
@pytest.mark.parametrize(
    "query,named,common_docs,dated_turn",
    [
        ("frozen garden pond slugs", "", 1_000, ""),
        ("frozen garden pond slugs bob", "bob", 1_000, ""),
        ("frozen garden pond slugs", "", 3, ""),
        ("garden lettuce", "", 0, ""),
        ("pruning roses", "", 1_000, ""),  # one message holds both: a lexical list without spread
        ("when did the garden pond freeze", "", 1_000, "garden 5: the pond froze again last week"),
    ],
)
async def test_the_sql_fusion_equals_the_pure_definition_with_bm25_computed_here(
    settings, garden, monkeypatch, query, named, common_docs, dated_turn
):
    import math

    import numpy as np
    from sqlalchemy.ext.asyncio import create_async_engine

    import projections.message_ranking as ranking
    from projections.message_ranking import (
        BM25_B,
        BM25_K1,
        SHORT_LEXEMES,
        asks_when,
        fused_score,
        lexical_match,
        placed_in_time,
    )
    from projections.message_search import search_messages
    from projections.search_shape import MessageSearch

    if dated_turn:
        c, _, _ = garden
        await c.add("w", "s2", [messages_pb2.NewMessage(peer_id="alice", content=dated_turn, created_at=ts(5))])
        eventually(lambda: embedded_count(settings) == 5, 60)
    monkeypatch.setattr(ranking, "COMMON_DOCS", common_docs)
    monkeypatch.setattr(ranking, "COMMON_SHARE", 0.0)

    vector = np.array(make_embedder().embed_sync([query])[0])
    engine = create_async_engine(settings.database.url).execution_options(
        schema_translate_map={None: settings.database.schema_name}
    )
    async with engine.connect() as conn:
        got = await search_messages(conn, MessageSearch(workspace_id="w", query=query, vector=list(vector), limit=5))
        rows = (
            await conn.execute(
                select(
                    messages.c.message_id,
                    messages.c.session_id,
                    messages.c.seq,
                    messages.c.embedding,
                    func.tsvector_to_array(messages.c.content_tsv),
                    messages.c.peer_id,
                )
            )
        ).all()
        words = set((await conn.execute(select(func.tsvector_to_array(func.to_tsvector("english", query))))).scalar())
    words -= {named}
    await engine.dispose()
    # BM25 with binary tf over the workspace's four messages, from their lexemes alone
    docs = {r[0]: set(r[4]) for r in rows}
    mean_length = sum(len(d) for d in docs.values()) / len(docs)
    df = {w: sum(w in d for d in docs.values()) for w in words}
    idf = {w: math.log(1 + (len(docs) - n + 0.5) / (n + 0.5)) for w, n in df.items() if n}
    bm25 = {
        m: sum(idf[w] for w in d & idf.keys())
        * (BM25_K1 + 1)
        / (1 + BM25_K1 * (1 - BM25_B + BM25_B * len(d) / mean_length))
        for m, d in docs.items()
    }
    similarity = {r[0]: float(np.dot(r[3], vector) / np.linalg.norm(r[3]) / np.linalg.norm(vector)) for r in rows}
    matched = [m for m in docs if lexical_match(docs[m], {w: n for w, n in df.items() if n}, len(docs))]
    if common_docs == 3:  # the rule changed the list: the two turns holding only "garden" are not in it
        assert len(matched) == 2 < len([m for m in docs if docs[m] & idf.keys()])
    at = {(r[1], r[2]): r[0] for r in rows}
    neighbours = {r[0]: [at[(r[1], r[2] + d)] for d in (-1, 1) if (r[1], r[2] + d) in at] for r in rows}
    expected = fused_score(
        {m: (similarity[m], bm25[m]) for m in docs},
        (list(similarity.values()), [bm25[m] for m in matched]),
        neighbours,
        by_named=frozenset(r[0] for r in rows if r[5] == named),
        short=frozenset(m for m, d in docs.items() if len(d) < SHORT_LEXEMES),
        session_of={r[0]: r[1] for r in rows},
        placed=frozenset(m for m, d in docs.items() if placed_in_time(d)) if asks_when(query) else frozenset(),
    )
    if dated_turn:  # the lift is there to be checked: the dated turn is the only one placed in time
        assert sum(placed_in_time(d) for d in docs.values()) == 1
    assert [r["message_id"] for r in got] == [m for m, _ in expected]
    assert [r["score"] for r in got] == pytest.approx([s for _, s in expected], abs=1e-4)


async def test_a_vector_of_another_model_stays_on_the_log_and_is_never_compared_with_the_query(settings, garden):
    c, _, _ = garden
    before = contents(await search_ws(c, "frozen pond", limit=4))
    query = make_embedder().embed_sync(["frozen pond"])[0]
    engine = sync_engine(settings.database)
    m = messages.c
    with engine.connect() as conn:
        first = conn.execute(select(m.message_id).where(m.content.like("garden 1%"))).scalar()
    log = EventLog(settings.kafka)
    log.start()  # another model's vector, equal to the query's own: what `peerlog reembed` appends
    token = log.append_sync(
        [
            MessagesEmbedded(
                workspace_id="w",
                session_id="s1",
                embedding_model="impostor",
                producer=P,
                messages=(EmbeddedMessage(message_id=first, session_id="s1", vector=tuple(query)),),
            )
        ]
    ).encode()
    log.close()
    await c.list_messages("w", "s1", token)  # the projector is past the impostor's event
    with engine.connect() as conn:
        assert conn.execute(select(m.embedding_model).where(m.message_id == first)).scalar() == LOCAL_MODEL
        # a projection made under another setting: the row's vector is not of the model queries use
        conn.execute(
            messages.update().where(m.message_id == first).values(embedding=list(query), embedding_model="impostor")
        )
        conn.commit()
    engine.dispose()
    after = contents(await search_ws(c, "frozen pond", limit=4))
    # compared, similarity 1.0 would have put garden 1 first; it counts as the list's lowest instead (where
    # it then stands among the others depends on the list's spread without it and on its session's lead)
    assert after[0] == before[0] and after[0].startswith("garden 3") and not after[1].startswith("garden 1")


async def test_a_search_plans_generically_and_the_next_read_on_its_connection_plans_as_postgres_chooses(
    settings, garden
):
    from sqlalchemy import text

    from projections.db import async_engine
    from projections.message_search import search_messages
    from projections.search_shape import MessageSearch

    settings = settings.model_copy(update={"database": settings.database.model_copy(update={"pool_size": 1})})
    engine = async_engine(settings.database)  # one pooled connection: the next read borrows the search's
    mode = text("SELECT current_setting('plan_cache_mode')")
    try:
        async with engine.connect() as conn:
            found = await search_messages(conn, MessageSearch("w", "garden pond", [0.1] * 384, limit=3))
            assert len(found) == 3 and await conn.scalar(mode) == "force_generic_plan"
        async with engine.connect() as conn:
            assert await conn.scalar(mode) == "auto"
    finally:
        await engine.dispose()


async def test_a_search_in_a_snapshot_plans_generically_only_until_the_snapshot_ends(settings, garden):
    from sqlalchemy import text

    from projections.db import GENERIC_PLANS, async_engine
    from projections.message_search import search_messages
    from projections.search_shape import MessageSearch

    settings = settings.model_copy(update={"database": settings.database.model_copy(update={"pool_size": 1})})
    engine = async_engine(settings.database)
    mode = text("SELECT current_setting('plan_cache_mode')")
    try:
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
            async with conn.begin():  # as GetContext's snapshot (ApiDeps.snapshot)
                found = await search_messages(conn, MessageSearch("w", "garden pond", [0.1] * 384, limit=3))
                assert len(found) == 3 and await conn.scalar(mode) == "force_generic_plan"
            # the transaction's end undid it: nothing is left for the pool to reset at the next checkout
            assert await conn.scalar(mode) == "auto" and GENERIC_PLANS not in conn.info
    finally:
        await engine.dispose()


async def test_a_search_whose_hits_pass_4_mib_is_cut_short_and_says_so(channel):
    c = Client(channel)
    await c.workspace("big")
    await c.peer("big", "alice")
    await c.session("big", "s", members=["alice"])
    body = "zebra " + "€€€€€ " * 4160  # within 25,000 characters, ~66 kB of UTF-8
    token = (await c.add("big", "s", [("alice", body)] * 100)).consistency_token
    request = sessions_pb2.SearchSessionMessagesRequest(
        workspace_id="big", session_id="s", query="zebra", limit=100, consistency={"consistency_token": token}
    )
    got = await c.sessions.SearchMessages(request)  # a default client: 4 MiB at most
    assert got.truncated and 40 <= len(got.results) < 100
    fewer = await c.sessions.SearchMessages(
        sessions_pb2.SearchSessionMessagesRequest(workspace_id="big", session_id="s", query="zebra", limit=10)
    )
    assert not fewer.truncated and len(fewer.results) == 10


def crowd_with_another_workspace(settings, workspace_id: str, copies: int) -> None:
    """`copies` messages of another workspace in this test's schema, each vector a noisy copy (cosine
    about 0.9) of one of the schema's vectors: a larger tenant talking about the same things. Written
    straight into the projection (their content matters to no search here), then analysed, as
    autovacuum would."""
    engine = sync_engine(settings.database)
    m = messages.c
    with engine.connect() as conn:
        seeds = np.array([list(v) for v in conn.execute(select(m.embedding).where(m.embedding.is_not(None))).scalars()])
    rng = np.random.default_rng(7)
    vectors = seeds[rng.integers(len(seeds), size=copies)] + 0.025 * rng.standard_normal((copies, seeds.shape[1]))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    columns = "workspace_id, message_id, session_id, seq, peer_id, content, created_at, recorded_at, metadata, event_id"
    with engine.raw_connection() as raw, raw.cursor() as cur:
        cur.execute(f'SET search_path TO "{settings.database.schema_name}", public')
        with cur.copy(f"COPY messages ({columns}, embedding, embedding_model) FROM STDIN") as copy:
            for i, v in enumerate(vectors):
                at = "2026-01-01T00:00:00Z"
                row = (workspace_id, f"o{i}", "crowd", i, "p", "-", at, at, "{}", f"crowd-{i}")
                copy.write_row((*row, "[" + ",".join(map(str, v)) + "]", LOCAL_MODEL))
        cur.execute("ANALYZE messages")
        raw.commit()
    engine.dispose()


async def test_a_small_workspace_beside_a_larger_one_searches_all_of_its_messages(settings, garden):
    """One HNSW graph holds every workspace's vectors, and pgvector's walk gives up after
    hnsw.max_scan_tuples entries (20,000 by default; 300 here, so that 3,000 vectors stand for 200,000).
    A workspace holding a sliver of the graph compares its own messages instead of walking: before, the
    walk came back with about one in ten of them, and a search found nothing the query had no word for."""
    from services.api.server import start
    from tests.support.auth import admin_channel

    crowd_with_another_workspace(settings, "other", 3_000)
    url = f"{settings.database.url}?options=-c%20hnsw.max_scan_tuples%3D300"
    limited = settings.model_copy(update={"database": settings.database.model_copy(update={"url": url})})
    server = await start(limited)
    try:
        async with admin_channel(limited, server.port) as chan:
            # no word of the query is in any message: only the semantic list can find them
            found = contents(await search_ws(Client(chan), "flowers, vegetables and ice", limit=10))
    finally:
        await server.stop(0)
    assert sorted(text.split(":")[0] for text in found) == [f"garden {i}" for i in range(1, 5)]
