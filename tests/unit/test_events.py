"""Events are immutable, keyed by their payload, and refuse to be read when they can't be understood."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

import orjson
import pydantic
import pytest

from services.bus.topics import ALL_TOPICS, SESSIONS, topic_for
from services.events import (
    Event,
    EventDecodeError,
    MemberJoined,
    MessageAppended,
    ProducerInfo,
    UnknownEventType,
    UnsupportedSchemaVersion,
    decode,
    encode,
    event_types,
)

P = ProducerInfo(component="test", version="0")
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def message(**kw) -> MessageAppended:
    fields = dict(
        workspace_id="w", session_id="s", message_id="m", peer_id="p", content="hi", created_at=NOW, producer=P
    )
    return MessageAppended(**{**fields, **kw})


def test_an_event_survives_the_wire_unchanged():
    e = message(metadata={"lang": "en", "nested": {"n": [1, 2]}})
    assert decode(encode(e)) == e


def test_the_key_is_derived_from_the_payload_with_the_workspace_first():
    assert message().key == "w/s"
    with pytest.raises(pydantic.ValidationError, match="does not match"):
        message(key="other/s")


def test_events_are_frozen():
    with pytest.raises(pydantic.ValidationError):
        message().content = "changed"


def test_every_event_gets_a_unique_time_ordered_id():
    ids = [message().event_id for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert ids == sorted(ids)


def test_unknown_types_newer_versions_and_garbage_are_refused_with_a_reason():
    with pytest.raises(UnknownEventType, match="MessageTeleported"):
        decode(orjson.dumps({"type": "MessageTeleported"}))
    newer = orjson.loads(encode(message()))
    newer["schema_version"] = MessageAppended.schema_version_current + 1
    with pytest.raises(UnsupportedSchemaVersion, match="upgrade peerlog"):
        decode(orjson.dumps(newer))
    with pytest.raises(EventDecodeError, match="not JSON"):
        decode(b"\x00\x01")
    broken = orjson.loads(encode(message()))
    del broken["content"]
    with pytest.raises(EventDecodeError, match="content"):
        decode(orjson.dumps(broken))


def test_an_old_schema_version_is_upcast_before_validation():
    class ThingRenamed(Event):
        schema_version_current: ClassVar[int] = 2
        upcasters: ClassVar = {1: lambda d: {**{k: v for k, v in d.items() if k != "old"}, "new": d["old"]}}
        new: str

    v1 = {"type": "ThingRenamed", "schema_version": 1, "workspace_id": "w", "old": "x", "producer": P.model_dump()}
    got = decode(orjson.dumps(v1))
    assert got.new == "x" and got.schema_version == 2
    event_types()  # the registry still answers after a test-local type registered itself


def test_every_event_type_has_exactly_one_topic_and_session_facts_share_one():
    declared = [e for spec in ALL_TOPICS for e in spec.events]
    assert len(declared) == len(set(declared))
    assert topic_for(message()) is SESSIONS
    joined = MemberJoined(workspace_id="w", session_id="s", peer_id="p", joined_at=NOW, producer=P)
    assert topic_for(joined) is SESSIONS and joined.key == message().key


def test_a_promotion_is_ordered_with_the_pairs_perceptions_and_original_is_stored_as_empty():
    from services.bus.topics import PERCEIVED
    from services.events import ORIGINAL, DerivationPromoted, MessagePerceived, stored_derivation

    e = DerivationPromoted(workspace_id="w", observer_id="a", observed_id="b", derivation="v2", producer=P)
    assert e.key == "w/a/b" and topic_for(e) is PERCEIVED
    assert MessagePerceived.key_fields == DerivationPromoted.key_fields
    assert (stored_derivation(ORIGINAL), stored_derivation("v2")) == ("", "v2")


def test_a_clients_observation_written_before_v3_reads_as_in_every_derivation_and_a_derived_one_keeps_its_own():
    from services.events import PAIR_WIDE, ObservationAdded

    def v2(**kw) -> dict:
        e = ObservationAdded(
            workspace_id="w", observer_id="a", observed_id="b", observation_id="o", level="explicit", content="c",
            derivation="v2", producer=P, **kw,
        )  # fmt: skip
        return {**orjson.loads(encode(e)), "schema_version": 2}

    assert decode(orjson.dumps(v2())).derivation == PAIR_WIDE
    assert decode(orjson.dumps(v2(batch_id="b1"))).derivation == "v2"
    assert decode(orjson.dumps(v2(dream_id="d1"))).derivation == "v2"


def _observation(**kw):
    from services.events import ObservationAdded

    fields = dict(
        workspace_id="w", observer_id="a", observed_id="b", observation_id="o", level="explicit", content="c",
        embedding_model="m", producer=P,
    )  # fmt: skip
    return ObservationAdded(**{**fields, **kw})


def test_a_vector_goes_on_the_log_as_base64_float32_and_comes_back_as_the_same_values():
    import numpy as np

    values = np.random.default_rng(7).standard_normal(384).astype(np.float32)
    e = _observation(embedding=values.tolist())
    raw = encode(e)
    assert isinstance(orjson.loads(raw)["embedding"], str)
    assert len(raw) < 2_900  # 384 decimals took 7.7 kB of an 8.7 kB event
    back = decode(raw)
    assert back == e and np.array_equal(np.asarray(back.embedding), values)
    assert back.embedding == values.tolist() and len(back.embedding) == 384
    assert decode(encode(_observation())).embedding == () and not _observation().embedding
    assert back.embedding != ["not", "numbers"] and back.embedding != values.tolist()[:-1]


def test_vectors_written_as_lists_of_numbers_by_older_versions_read_as_the_same_vectors():
    from services.events import EmbeddedMessage, MessagesEmbedded

    e = _observation(embedding=[0.25, -0.5, 1.0])
    old = {**orjson.loads(encode(e)), "schema_version": 3, "embedding": [0.25, -0.5, 1.0]}
    assert decode(orjson.dumps(old)) == e
    embedded = MessagesEmbedded(
        workspace_id="w", session_id="s", embedding_model="m", producer=P,
        messages=(EmbeddedMessage(message_id="m1", session_id="s", vector=[0.1, 0.2]),),
    )  # fmt: skip
    old = orjson.loads(encode(embedded))
    old["schema_version"], old["messages"][0]["vector"] = 1, [0.1, 0.2]
    assert decode(orjson.dumps(old)) == embedded
    assert decode(orjson.dumps(old)).messages[0].vector == [0.1, 0.2]  # as float32, as Postgres keeps it


@pytest.mark.parametrize(
    "vector",
    ["not base64!", "AAAAAAA=", [float("nan")], [1e39], [[1.0, 2.0]], ["x"], {"a": 1}, 7],
    ids=["garbage", "bytes-not-fours", "nan", "beyond-float32", "nested", "words", "object", "number"],
)
def test_a_vector_that_is_not_finite_float32_values_is_refused_with_a_reason(vector):
    raw = {**orjson.loads(encode(_observation())), "embedding": vector}
    with pytest.raises(EventDecodeError, match="embedding"):
        decode(orjson.dumps(raw))
