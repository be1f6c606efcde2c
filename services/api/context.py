"""What the API's service functions need: the projections, the log, freshness, the embedding model,
Chat's agent and who we are."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from services.api.freshness import Freshness
from services.bus.producer import EventLog
from services.dialectic.agent import Dialectic
from services.events import ProducerInfo
from services.llm.embeddings import Embedder

API_PRODUCER = ProducerInfo(component="api", version="0.1.0")


@dataclass(frozen=True)
class ApiContext:
    engine: AsyncEngine
    log: EventLog
    freshness: Freshness
    embedder: Embedder  # one per server: the local model loads once, on first use
    producer: ProducerInfo = API_PRODUCER
    dialectic: Dialectic | None = None  # Chat's agent, with one model client per reasoning level
