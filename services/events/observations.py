"""A pair's store: observations and what happened to them, plus derivation bookkeeping."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from services.events.base import Event
from services.events.perception import PAIR_KEY, PAIR_WIDE
from services.events.requests import KeyedRequest, keyed_v1_to_v2
from services.events.vectors import EMPTY, PackedVector


class Level(StrEnum):
    EXPLICIT = "explicit"
    DEDUCTIVE = "deductive"
    INDUCTIVE = "inductive"
    CONTRADICTION = "contradiction"


class Source(BaseModel):
    """The message an explicit observation came from, and the verbatim span that supports it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    message_id: str
    span: str


class PairEvent(Event):
    """Base of every event about one (observer, observed) store; keyed so a pair's history is in order."""

    abstract: ClassVar[bool] = True
    key_fields: ClassVar[tuple[str, ...]] = PAIR_KEY

    observer_id: str
    observed_id: str
    # which derivation of the pair's store this belongs to: "" is the original live one; a name is a
    # re-derivation (peerlog rederive) kept apart until it is promoted (DerivationPromoted); PAIR_WIDE
    # is what a client wrote, in every derivation
    derivation: str = ""


def client_writes_pair_wide(data: dict) -> dict:
    """Version 2 stamped a client's observation with the derivation current when it was written, so a
    promotion hid it; version 3 stamps it PAIR_WIDE. A client's write is the one with no batch and no dream."""
    if data.get("batch_id") is None and data.get("dream_id") is None:
        return {**data, "derivation": PAIR_WIDE}
    return data


class ObservationAdded(PairEvent):
    """A new proposition in the pair's store, with the embedding computed for it (so replay needs no model)."""

    # 2: `request`; 3: a client's write is PAIR_WIDE; 4: the embedding as base64 (vectors.py reads both)
    schema_version_current: ClassVar[int] = 4
    upcasters = {1: keyed_v1_to_v2, 2: client_writes_pair_wide, 3: lambda data: data}

    observation_id: str
    level: Level
    content: str
    session_id: str | None = None
    sources: tuple[Source, ...] = ()
    premise_ids: tuple[str, ...] = ()
    confidence: str | None = None
    # inductive only: the kind of pattern (preference, behaviour, personality, tendency, correlation)
    pattern_type: str | None = None
    embedding: PackedVector = EMPTY
    embedding_model: str = ""
    batch_id: str | None = None
    dream_id: str | None = None  # set when a dream wrote it
    request: KeyedRequest | None = None  # set when a client wrote it with an idempotency key


class EmbeddedObservation(BaseModel):
    """One observation's vector."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    observation_id: str
    vector: PackedVector


class ObservationsEmbedded(PairEvent):
    """Observations of one pair were embedded again (`peerlog reembed`), typically by another model;
    on the pair's topic, after the ObservationAdded events it re-embeds."""

    schema_version_current: ClassVar[int] = 2  # 2: the vectors as base64 (vectors.py reads both)
    upcasters = {1: lambda data: data}

    observations: tuple[EmbeddedObservation, ...]
    embedding_model: str


class ObservationReinforced(PairEvent):
    """The same proposition was derived again (times_derived + 1)."""

    observation_id: str
    sources: tuple[Source, ...] = ()
    batch_id: str | None = None


class ObservationSuperseded(PairEvent):
    """An observation was replaced by a better or newer one; its history stays."""

    observation_id: str
    superseded_by: str
    reason: str


class ObservationDeleted(PairEvent):
    """An observation was withdrawn (soft: the history stays)."""

    observation_id: str
    reason: str = ""


class ObservationRejected(PairEvent):
    """A proposed observation failed a check (e.g. its span is not in the cited message)."""

    rejection_id: str
    level: Level
    content: str
    reason: str
    sources: tuple[Source, ...] = ()
    batch_id: str | None = None
    premise_ids: tuple[str, ...] = ()
    dream_id: str | None = None


class DerivationStarted(PairEvent):
    """The deriver began a batch (sent outside the batch's transaction, so status can show in-flight work)."""

    batch_id: str
    message_ids: tuple[str, ...]


class BatchDerived(PairEvent):
    """A batch of perceived messages was derived; counts say what came of it."""

    batch_id: str
    message_ids: tuple[str, ...]
    added: int
    reinforced: int
    superseded: int
    rejected: int
    model: str
    prompt_version: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duration_ms: int = 0


class DerivationDeadLettered(PairEvent):
    """The model kept failing on a batch; it is parked with the error, never marked done."""

    batch_id: str
    message_ids: tuple[str, ...]
    error: str
    attempts: int = Field(ge=1)
