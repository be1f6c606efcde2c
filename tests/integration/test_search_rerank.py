"""Re-ranking by the cross-encoder: SearchMessages' `rerank` option and Chat's message-search tools, on a
real broker, Postgres, embedder and the model read from its pinned wheel."""

from __future__ import annotations

import grpc
import pytest

from peerlog.v1 import peers_pb2, sessions_pb2, workspaces_pb2
from services.cli.client import Client
from services.dialectic.settings import DialecticSettings
from services.llm.settings import LlmSettings, RerankSettings
from tests.integration.test_chat import ask, call, tool_messages
from tests.integration.test_message_search import FILLER, embedded_count
from tests.support.auth import admin_channel
from tests.support.model_server import Reply
from tests.support.wait import eventually

QUESTION = "What instrument does Maria play?"
ANSWER = "I practised the violin for three hours yesterday."
# each shares a word with the question ("play"); none says what she plays
DISTRACTORS = (
    "Playing games with my nephew is my favourite thing to do.",
    "We play football every Sunday and play until it gets dark.",
    "Did you see the play at the theatre? Such a fun play to watch.",
)


# the model's order alone: how far the blend with the search's own score moves it is the unit tests' part
MODEL_ORDER = RerankSettings(weight=0.0)


@pytest.fixture
async def serve(settings, projector, model_server):
    """Start an API server with these re-ranking settings, whose Chat talks to the test model server."""
    from services.api.server import start

    running = []

    async def start_with(rerank: RerankSettings) -> grpc.aio.Channel:
        llm = LlmSettings(base_url=model_server.base_url, model="test-model", timeout_s=5, max_retries=0)
        update = {"llm": llm, "dialectic": DialecticSettings(), "rerank": rerank}
        server = await start(settings.model_copy(update=update))
        running.append((server, admin_channel(settings, server.port)))
        return running[-1][1]

    yield start_with
    for server, chan in running:
        await chan.close()
        await server.stop(0)


@pytest.fixture
async def talk(serve, settings, start_worker):
    """maria and bob talk in s: the answer, three turns that share the question's words, and filler; all embedded."""
    start_worker("embedder")
    chan = await serve(MODEL_ORDER)
    c = Client(chan)
    await c.setup_conversation("w", "s", peers=("maria", "bob"))
    turns = [("maria", t) for t in DISTRACTORS] + [("maria", ANSWER)] + [("bob", t) for t in FILLER[:12]]
    sent = await c.add("w", "s", turns)
    eventually(lambda: embedded_count(settings) == len(turns), 60)
    return chan, sent.consistency_token


async def search(chan, **kw):
    return await Client(chan).workspaces.SearchMessages(
        workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id="w", query=QUESTION, **kw)
    )


def contents(response) -> list[str]:
    return [r.message.content for r in response.results]


async def test_a_reranked_search_puts_the_answer_first_where_the_search_alone_does_not(talk):
    chan, _ = talk
    plain = await search(chan, limit=3)
    reranked = await search(chan, limit=3, rerank=True)

    assert ANSWER not in contents(plain)  # the shared words lead the plain search astray
    assert contents(reranked)[0] == ANSWER  # found among the candidates beyond the limit
    scores = [r.score for r in reranked.results]
    assert scores == sorted(scores, reverse=True) and len(scores) == 3


async def test_session_and_peer_level_searches_rerank_too(talk):
    chan, _ = talk
    c = Client(chan)
    by_session = await c.sessions.SearchMessages(
        sessions_pb2.SearchSessionMessagesRequest(workspace_id="w", session_id="s", query=QUESTION, rerank=True)
    )
    by_peer = await c.peers.SearchMessages(
        peers_pb2.SearchPeerMessagesRequest(workspace_id="w", peer_id="maria", query=QUESTION, rerank=True)
    )

    assert contents(by_session)[0] == contents(by_peer)[0] == ANSWER


async def test_a_server_without_a_reranking_model_refuses_rerank_and_still_searches(serve):
    chan = await serve(RerankSettings(model=""))
    await Client(chan).setup_conversation("w", "s", peers=("maria", "bob"))

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await search(chan, rerank=True)

    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "PEERLOG_RERANK_MODEL" in refused.value.details()
    assert list((await search(chan)).results) == []  # nothing posted, nothing found, no error


@pytest.mark.parametrize("chat_reranks", [True, False])
async def test_chats_search_tool_reranks_unless_turned_off(talk, serve, model_server, chat_reranks):
    chan = talk[0] if chat_reranks else await serve(RerankSettings(weight=0.0, chat=False))
    model_server.script([Reply(tool_calls=[call("search_messages", query=QUESTION, limit=1)])])
    model_server.reply_with(lambda req: Reply(content="the violin"))

    await ask(chan, observer_id="bob", target_id="maria", query=QUESTION)

    (result,) = tool_messages(model_server.chat_requests()[1])
    assert (ANSWER in result) is chat_reranks
