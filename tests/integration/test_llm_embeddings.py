"""The real local embedding models (all-MiniLM-L6-v2 and bge-small-en-v1.5, int8 ONNX) and the
OpenAI-compatible embedder."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from prometheus_client import REGISTRY

from services.llm.embeddings import MINILM, Embedder, LocalOnnxEmbedder, OpenAIEmbedder
from services.llm.errors import EmbeddingError, ModelUnavailable
from services.llm.query_cache import QueryVectorCache
from services.llm.settings import EmbeddingSettings
from tests.support.model_server import ModelServer


@pytest.fixture(scope="module")
def local() -> LocalOnnxEmbedder:
    return LocalOnnxEmbedder(EmbeddingSettings(batch_size=8), MINILM)


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))  # the vectors are unit length


def test_local_embedder_returns_384_dimension_unit_vectors(local: LocalOnnxEmbedder) -> None:
    vectors = local.embed_sync(["Alice moved to Lisbon.", "", "x" * 5000])

    assert isinstance(local, Embedder)
    assert np.array(vectors).shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize(
    ("anchor", "paraphrase", "unrelated"),
    [
        ("A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell sharply today."),
        ("I love my dog.", "My puppy is my favourite companion.", "Quantum chromodynamics describes the strong force."),
        ("How do I reset my password?", "I forgot my login, how can I change it?", "The weather in Paris is sunny."),
    ],
)
def test_a_paraphrase_ranks_above_an_unrelated_sentence(
    local: LocalOnnxEmbedder, anchor: str, paraphrase: str, unrelated: str
) -> None:
    a, p, u = local.embed_sync([anchor, paraphrase, unrelated])

    assert cosine(a, p) > 0.5
    assert cosine(a, u) < 0.2
    assert cosine(a, p) > cosine(a, u) + 0.4


@pytest.mark.parametrize("model", ["e5-small-v2", "bge-small-en-v1.5"])
def test_a_model_from_its_jar_gives_unit_vectors_that_rank_a_paraphrase_first(model: str) -> None:
    bge = LocalOnnxEmbedder(EmbeddingSettings(batch_size=8), model)
    pairs = [
        ("I love my dog.", "My puppy is my favourite companion.", "Quantum chromodynamics describes the strong force."),
        ("How do I reset my password?", "I forgot my login, how can I change it?", "The weather in Paris is sunny."),
    ]
    for anchor, paraphrase, unrelated in pairs:
        a, p, u = bge.embed_sync([anchor, paraphrase, unrelated])
        np.testing.assert_allclose(np.linalg.norm([a, p, u], axis=1), 1.0, atol=1e-5)
        # these models' cosines sit higher than MiniLM's: compare the margin, not fixed levels
        assert cosine(a, p) > cosine(a, u) + 0.15
    assert bge.embed_sync(["same text"] * 3)[0] == pytest.approx(bge.embed_sync(["same text"])[0], abs=1e-5)


def test_batching_and_order_do_not_change_the_vectors(local: LocalOnnxEmbedder) -> None:
    texts = [f"sentence number {i} " + "word " * (i * 7 % 40) for i in range(21)]

    together = np.array(local.embed_sync(texts))
    alone = np.array([local.embed_sync([text])[0] for text in texts])

    np.testing.assert_allclose(together, alone, atol=1e-5)


async def test_async_embedding_matches_sync(local: LocalOnnxEmbedder) -> None:
    texts = ["Bob is allergic to peanuts.", "Alice owns a cat."]
    assert np.allclose(await local.embed(texts), local.embed_sync(texts), atol=1e-6)
    assert await local.embed([]) == []


def test_one_embedder_is_safe_to_share_between_threads() -> None:
    fresh = LocalOnnxEmbedder()  # not loaded yet: every thread races to load it
    texts = [f"message {i} about the weekend hike" for i in range(8)]
    expected = np.array(LocalOnnxEmbedder().embed_sync(texts))

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda t: fresh.embed_sync([t])[0], texts))

    np.testing.assert_allclose(np.array(results), expected, atol=1e-5)


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer(embedding_dimensions=16) as running:
        yield running


def remote_settings(server: ModelServer, **overrides: object) -> EmbeddingSettings:
    base = {"provider": "openai", "model": "test-embed", "dimensions": 16, "batch_size": 2, "backoff_s": 0.01}
    return EmbeddingSettings(base_url=server.base_url, **{**base, **overrides})


async def test_openai_embedder_batches_and_keeps_order(server: ModelServer) -> None:
    embedder = OpenAIEmbedder(remote_settings(server))
    texts = ["alice likes tea", "bob likes coffee", "alice likes tea", "carol"]

    vectors = await embedder.embed(texts)
    await embedder.aclose()

    assert np.array(vectors).shape == (4, 16)
    assert vectors[0] == vectors[2] and vectors[0] != vectors[1]
    assert [r["input"] for r in server.requests] == [texts[:2], texts[2:]]
    assert all(r["encoding_format"] == "float" and r["model"] == "test-embed" for r in server.requests)


def test_openai_embedder_sync_matches_async(server: ModelServer) -> None:
    embedder = OpenAIEmbedder(remote_settings(server))
    texts = ["one", "two", "three"]

    assert embedder.embed_sync(texts) == asyncio.run(embedder.embed(texts))


async def test_a_dimension_mismatch_is_an_error(server: ModelServer) -> None:
    embedder = OpenAIEmbedder(remote_settings(server, dimensions=384))

    with pytest.raises(EmbeddingError, match="returned 16 dimensions, settings say 384"):
        await embedder.embed(["hello"])


async def test_an_unreachable_embedding_server_is_model_unavailable() -> None:
    settings = EmbeddingSettings(provider="openai", base_url="http://127.0.0.1:9/v1", max_retries=1, backoff_s=0.01)

    with pytest.raises(ModelUnavailable, match="after 2 attempt"):
        await OpenAIEmbedder(settings).embed(["hello"])


async def test_a_repeated_query_is_embedded_once_and_the_least_recent_query_is_forgotten_first(
    server: ModelServer,
) -> None:
    cache = QueryVectorCache(OpenAIEmbedder(remote_settings(server)), size=2)
    counted = {
        o: REGISTRY.get_sample_value("peerlog_query_vectors_total", {"outcome": o}) or 0 for o in ("hit", "miss")
    }

    first = await cache.embed(["where does alice live"])
    again = await cache.embed(["where does alice live"])
    await cache.embed(["what does bob drink"])
    await cache.embed(["where does alice live"])  # now the most recent: bob's query goes first
    await cache.embed(["carol's birthday"])
    await cache.embed(["where does alice live"])
    await cache.embed(["what does bob drink"])
    await cache.aclose()

    assert first == again
    assert [r["input"] for r in server.requests] == [
        ["where does alice live"],
        ["what does bob drink"],
        ["carol's birthday"],
        ["what does bob drink"],
    ]
    assert (cache.hits, cache.misses) == (3, 4)
    assert {
        o: REGISTRY.get_sample_value("peerlog_query_vectors_total", {"outcome": o}) - n for o, n in counted.items()
    } == {
        "hit": 3,
        "miss": 4,
    }  # what the API's metrics endpoint shows


async def test_batches_pass_the_query_cache_by_and_a_size_of_zero_turns_it_off(server: ModelServer) -> None:
    batches = QueryVectorCache(OpenAIEmbedder(remote_settings(server)), size=8)
    off = QueryVectorCache(OpenAIEmbedder(remote_settings(server)), size=0)

    await batches.embed(["a", "b"])
    await batches.embed(["a", "b"])
    await off.embed(["a"])
    await off.embed(["a"])
    await batches.aclose()
    await off.aclose()

    assert [r["input"] for r in server.requests] == [["a", "b"], ["a", "b"], ["a"], ["a"]]
