"""The worker polls often enough for Kafka to keep it in its group through the longest batch it may run."""

from __future__ import annotations

from dataclasses import dataclass

from services.bus.runner import DEFAULT_BATCH_BUDGET_S, max_poll_interval_ms
from services.dreamer.settings import DreamSettings


@dataclass
class Bounded:
    name: str = "bounded"
    inputs: tuple = ()
    max_batch: int = 4
    event_budget_s: float | None = None


def test_a_processor_with_an_event_budget_gets_an_interval_above_a_whole_batch_of_one_key():
    dreamer = Bounded(event_budget_s=DreamSettings().max_dream_s)
    assert max_poll_interval_ms(dreamer) > dreamer.max_batch * dreamer.event_budget_s * 1000


def test_a_longer_budget_or_a_bigger_batch_widens_the_interval():
    assert max_poll_interval_ms(Bounded(event_budget_s=100)) < max_poll_interval_ms(Bounded(event_budget_s=200))
    assert max_poll_interval_ms(Bounded(event_budget_s=100, max_batch=2)) < max_poll_interval_ms(
        Bounded(event_budget_s=100, max_batch=8)
    )


def test_a_processor_without_a_budget_keeps_the_default_interval():
    assert max_poll_interval_ms(Bounded()) > DEFAULT_BATCH_BUDGET_S * 1000
