"""The pure parts of hybrid message search: which messages get embedded, and rank fusion."""

from datetime import UTC, datetime

import pytest

from projections.message_search import depth, fuse
from services.embedder.policy import embedded, text_to_embed
from services.events import MessageAppended, MessagesEmbedded, ProducerInfo, SessionCreated, decode, encode

P = ProducerInfo(component="test", version="0")


def _message(content: str = "I adopted a greyhound") -> MessageAppended:
    return MessageAppended(workspace_id="w", session_id="s", message_id="m1", peer_id="alice", content=content,
                           created_at=datetime(2026, 1, 1, tzinfo=UTC), producer=P)


def test_only_messages_with_text_are_embedded():
    assert text_to_embed(_message()) == "I adopted a greyhound"
    assert text_to_embed(_message("   ")) is None
    assert text_to_embed(SessionCreated(workspace_id="w", session_id="s", producer=P)) is None


def test_embedded_event_is_keyed_by_session_caused_by_the_message_and_survives_the_wire():
    message = _message()
    event = embedded(message, [0.5, 0.25], "mini", P)
    assert event.key == "w/s" and event.causation_id == message.event_id
    assert event.messages[0].message_id == "m1" and event.messages[0].vector == (0.5, 0.25)
    assert decode(encode(event)) == event


def test_messages_embedded_refuses_a_message_of_another_session():
    with pytest.raises(ValueError, match="another|keyed"):
        MessagesEmbedded(workspace_id="w", session_id="s", embedding_model="mini", producer=P,
                         messages=[{"message_id": "m", "session_id": "other", "vector": [1.0]}])


def test_fuse_puts_an_item_in_both_lists_above_items_in_one():
    fused = fuse([["a", "both", "b"], ["c", "both"]])
    assert fused[0][0] == "both"
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 62)


def test_fuse_scores_are_reciprocal_ranks_and_ties_break_by_id():
    fused = fuse([["x", "y"], ["z"]], k=60)
    # x and z both rank first in one list: equal scores, ordered by id
    assert [i for i, _ in fused] == ["x", "z", "y"]
    assert dict(fused) == pytest.approx({"x": 1 / 61, "z": 1 / 61, "y": 1 / 62})


def test_fuse_of_nothing_is_empty():
    assert fuse([]) == [] and fuse([[], []]) == []


def test_candidate_depth_is_four_times_the_limit_but_at_least_fifty():
    assert depth(10) == 50 and depth(100) == 400
