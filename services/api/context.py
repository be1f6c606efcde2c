"""What the API's service functions need: the projections, the log, freshness and who we are."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from services.api.freshness import Freshness
from services.bus.producer import EventLog
from services.events import ProducerInfo

API_PRODUCER = ProducerInfo(component="api", version="0.1.0")


@dataclass(frozen=True)
class ApiContext:
    engine: AsyncEngine
    log: EventLog
    freshness: Freshness
    producer: ProducerInfo = API_PRODUCER
