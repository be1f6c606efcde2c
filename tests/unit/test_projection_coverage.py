"""Every event type the code can write has a projection handler, so replay never drops one silently."""

from projections.handlers import HANDLERS
from services.bus.topics import ALL_TOPICS
from services.events import event_types


def test_every_event_type_has_a_projection_handler_and_a_topic():
    types = {t for t in event_types().values() if t.__module__.startswith("services.events")}
    assert types - set(HANDLERS) == set()
    routed = {e for spec in ALL_TOPICS for e in spec.events}
    assert types - routed == set()
