"""The embedder processor's coalescer: texts asked for concurrently go to the model in one call."""

import asyncio

import pytest

from services.embedder.agent import Coalescer


class CountingEmbedder:
    """Vectors of length 1 holding the text's length; records each call's batch."""

    model_name, dimensions = "counting", 1

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.fail:
            raise RuntimeError("model down")
        return [[float(len(t))] for t in texts]

    def embed_sync(self, texts):  # pragma: no cover - the coalescer is async only
        raise NotImplementedError


async def test_concurrent_texts_share_one_model_call_and_each_gets_its_own_vector():
    model = CountingEmbedder()
    coalescer = Coalescer(model)
    vectors = await asyncio.gather(*(coalescer.embed("x" * n) for n in (1, 2, 3)))
    assert vectors == [[1.0], [2.0], [3.0]]
    assert model.calls == [["x", "xx", "xxx"]]


async def test_texts_asked_for_later_go_in_a_later_call():
    model = CountingEmbedder()
    coalescer = Coalescer(model)
    await coalescer.embed("a")
    await coalescer.embed("bb")
    assert model.calls == [["a"], ["bb"]]


async def test_a_model_failure_reaches_every_waiter():
    coalescer = Coalescer(CountingEmbedder(fail=True))
    results = await asyncio.gather(coalescer.embed("a"), coalescer.embed("b"), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    with pytest.raises(RuntimeError):
        await coalescer.embed("c")
