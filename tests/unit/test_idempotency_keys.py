"""The pure parts of idempotent writes: what counts as the same request, and old events without a key."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
import pytest

from services.api.idempotency import keyed
from services.api.observation_writes import NewObservation, _fingerprinted
from services.api.writes import NewMessage
from services.errors import InvalidArgument
from services.events import PAIR_WIDE, MessageAppended, ObservationAdded, ProducerInfo, Source, decode, encode

SCOPE = ("w", "s")


def fingerprint(*items, scope=SCOPE) -> str:
    return keyed("w", scope, "k", items).fingerprint


def test_no_key_no_keyed_request_and_a_key_follows_the_id_rules():
    assert keyed("w", SCOPE, "", [NewMessage("alice", "hi")]) is None
    with pytest.raises(InvalidArgument, match="idempotency_key"):
        keyed("w", SCOPE, "has space", [NewMessage("alice", "hi")])
    k = keyed("w", SCOPE, "k-1", [NewMessage("alice", "hi"), NewMessage("bob", "yo")])
    assert (k.scope, k.key, k.size) == ("w/s", "k-1", 2)


def test_the_same_request_has_one_fingerprint_and_any_change_makes_another():
    same = fingerprint(NewMessage("alice", "hi", metadata={"a": 1, "b": {"c": 2}}))
    assert same == fingerprint(NewMessage("alice", "hi", metadata={"b": {"c": 2}, "a": 1}))  # key order
    changed = [
        NewMessage("bob", "hi", metadata={"a": 1, "b": {"c": 2}}),
        NewMessage("alice", "hi!", metadata={"a": 1, "b": {"c": 2}}),
        NewMessage("alice", "hi", metadata={"a": 2, "b": {"c": 2}}),
        NewMessage("alice", "hi", metadata={"a": 1, "b": {"c": 2}}, message_id="m1"),
        NewMessage("alice", "hi", created_at=datetime(2026, 1, 1, tzinfo=UTC), metadata={"a": 1, "b": {"c": 2}}),
    ]
    assert len({same, *(fingerprint(m) for m in changed)}) == 1 + len(changed)
    assert fingerprint(NewMessage("alice", "hi", metadata={"a": 1, "b": {"c": 2}}), scope=("w", "s2")) != same


def test_observations_fingerprint_their_sources():
    plain = fingerprint(NewObservation("likes tea"))
    cited = fingerprint(NewObservation("likes tea", sources=(Source(message_id="m", span="tea"),)))
    assert plain != cited == fingerprint(NewObservation("likes tea", sources=(Source(message_id="m", span="tea"),)))


@pytest.mark.parametrize(
    "event",
    [
        MessageAppended(
            workspace_id="w",
            session_id="s",
            message_id="m",
            peer_id="p",
            content="hi",
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            producer=ProducerInfo(component="t", version="1"),
        ),
        ObservationAdded(
            workspace_id="w",
            observer_id="a",
            observed_id="b",
            observation_id="o",
            level="explicit",
            content="c",
            derivation=PAIR_WIDE,  # a client's write (no batch, no dream) reads as in every derivation
            producer=ProducerInfo(component="t", version="1"),
        ),
    ],
)
def test_an_event_of_schema_1_reads_as_one_without_a_key(event):
    old = orjson.loads(encode(event))
    old["schema_version"] = 1
    del old["request"]
    assert decode(orjson.dumps(old)) == event and event.schema_version == type(event).schema_version_current


@dataclass(frozen=True)
class ObservationBeforeClientIds:  # NewObservation as it was
    content: str
    session_id: str = ""
    sources: tuple[Source, ...] = ()


def test_an_observation_without_a_client_id_keeps_the_fingerprint_it_had_before_ids_existed():
    # a retry across the upgrade must still match its first request
    sources = (Source(message_id="m1", span="tea"),)
    scope, new = ("w", "a", "b"), _fingerprinted(NewObservation("Bob likes tea", "s", sources))
    assert (
        keyed("w", scope, "k", [new]).fingerprint
        == keyed("w", scope, "k", [ObservationBeforeClientIds("Bob likes tea", "s", sources)]).fingerprint
    )
    assert (
        keyed("w", scope, "k", [_fingerprinted(NewObservation("Bob likes tea", observation_id="o1"))]).fingerprint
        != keyed("w", scope, "k", [_fingerprinted(NewObservation("Bob likes tea"))]).fingerprint
    )
