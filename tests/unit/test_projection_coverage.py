"""Every event type the code can write has a projection handler, so replay never drops one silently."""

from projections.handlers import HANDLERS
from services.bus.topics import ALL_TOPICS
from services.events import event_types


def test_every_event_type_has_a_projection_handler_and_a_topic():
    types = {t for t in event_types().values() if t.__module__.startswith("services.events")}
    assert types - set(HANDLERS) == set()
    routed = {e for spec in ALL_TOPICS for e in spec.events}
    assert types - routed == set()


def test_a_rebuild_compares_every_table_of_the_projection():
    from projections.schema import DATA_TABLES, metadata

    # what waits to be joined depends on the order topics were read in; the build's marker is per build
    left_out = {"pending_message_embeddings", "projection_meta"}
    assert {t.name for t in metadata.sorted_tables} - left_out == {t.name for t in DATA_TABLES}
