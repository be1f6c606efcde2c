"""The deriver's per-pair state as stored in its changelog (JSON), and the recent-observation cache."""

from __future__ import annotations

import base64
from collections.abc import Sequence

import numpy as np
import orjson

from services.deriver.batching import Batching
from services.deriver.judge import KnownObservation
from services.events import Level


def load_batching(raw: dict | None) -> Batching:
    return Batching.model_validate(raw) if raw else Batching()


def _pack(embedding: Sequence[float]) -> str:
    # float16 keeps the cache small (768 bytes a vector); plenty for a 0.95 cosine threshold
    return base64.b64encode(np.asarray(embedding, dtype=np.float16).tobytes()).decode()


def _unpack(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in np.frombuffer(base64.b64decode(text), dtype=np.float16))


def load_recent(raw: dict | None, model: str) -> list[KnownObservation]:
    """The cached observations, if their vectors are of `model`: after a switch of embedding model they
    cannot be compared with the new model's (a cache from before models were recorded is dropped too)."""
    if not raw or raw.get("model") != model:
        return []
    return [
        KnownObservation(i["id"], Level(i["level"]), i["key"], i["session"], _unpack(i["emb"])) for i in raw["items"]
    ]


# the cache is one changelog record, which Kafka refuses past 1 MB: a fact of 2,000 characters can take
# 12 kB and more as JSON (a control character is 6 bytes there), so `keep` of them is bounded by bytes too
RECENT_BYTES = 256_000


def dump_recent(known: Sequence[KnownObservation], keep: int, model: str) -> dict:
    """The newest `keep` observations whose JSON fits RECENT_BYTES, oldest first, with the model of their
    vectors."""
    items: list[dict] = []
    size = 0
    for k in reversed(list(known)[-keep:] if keep else []):
        item = {
            "id": k.observation_id,
            "level": k.level.value,
            "key": k.normalised,
            "session": k.session_id,
            "emb": _pack(k.embedding),
        }
        size += len(orjson.dumps(item)) + 1
        if size > RECENT_BYTES:
            break
        items.append(item)
    items.reverse()
    return {"model": model, "items": items}
