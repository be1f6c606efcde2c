"""Peer cards are set and read per pair, validated, and kept as events."""

from __future__ import annotations

import grpc
import pytest

from peerlog.v1 import peers_pb2
from services.bus.topics import OBSERVATIONS
from services.cli.client import Client
from services.events import PeerCardUpdated
from tests.support.log import read_events


def set_card(c: Client, entries, observer="alice", observed="bob", workspace="w"):
    return c.peers.SetPeerCard(
        peers_pb2.SetPeerCardRequest(
            workspace_id=workspace, observer_id=observer, observed_id=observed, entries=entries
        )
    )


def get_card(c: Client, observer="alice", observed="bob", token=""):
    from peerlog.v1 import common_pb2

    return c.peers.GetPeerCard(
        peers_pb2.GetPeerCardRequest(
            workspace_id="w",
            observer_id=observer,
            observed_id=observed,
            consistency=common_pb2.ReadConsistency(consistency_token=token),
        )
    )


async def test_a_card_is_set_per_pair_and_the_latest_version_is_read(channel, settings):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    assert list((await get_card(c)).entries) == []
    await set_card(c, ["IDENTITY: Bob, a nurse in Oslo"])
    second = await set_card(c, ["IDENTITY: Bob, a nurse in Oslo", "ATTRIBUTE: allergic to peanuts"])
    got = await get_card(c, token=second.consistency_token)
    assert list(got.entries) == ["IDENTITY: Bob, a nurse in Oslo", "ATTRIBUTE: allergic to peanuts"]
    assert got.HasField("updated_at")
    assert list((await get_card(c, observer="bob", observed="")).entries) == []  # bob's own card is separate
    events = read_events(settings, OBSERVATIONS, lambda evs: len(evs) >= 2)
    assert [len(e.entries) for e in events if isinstance(e, PeerCardUpdated)] == [1, 2]


@pytest.mark.parametrize(
    "entries, phrase",
    [
        (["likes tea"], "must start with one of IDENTITY:"),
        (["ATTRIBUTE: " + "x" * 200], "the limit is 200"),
        ([f"ATTRIBUTE: fact {i}" for i in range(41)], "at most 40 entries"),
        (["INSTRUCTION:   "], "nothing after its prefix"),
    ],
)
async def test_invalid_cards_are_refused_with_the_rule_and_nothing_is_written(channel, entries, phrase):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await set_card(c, entries)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and phrase in err.value.details()
    assert list((await get_card(c)).entries) == []


async def test_a_card_of_1000_invalid_entries_is_a_short_invalid_argument_not_a_broken_status_header(channel):
    # the refusal listed all 1,000 entries (84 KB) and broke the 16 KB status header: RESOURCE_EXHAUSTED
    c = Client(channel)
    await c.setup_conversation("w", "s")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await set_card(c, [f"no prefix {i} " + "€" * 250 for i in range(1_000)])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert "at most 40 entries, got 1000" in err.value.details() and len(err.value.details()) < 200


async def test_a_card_with_a_problem_in_every_entry_names_a_few_problems_then_how_many_more(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await set_card(c, [f"no prefix {i} " + "€" * 250 for i in range(40)])  # two problems each
    details = err.value.details()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("invalid peer card: entries[0] ") and details.endswith(" and 77 more")
    assert len(details.encode()) < 1_000, details
    assert list((await get_card(c)).entries) == []


async def test_a_card_for_an_unknown_peer_is_not_found(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await set_card(c, ["IDENTITY: ghost"], observed="ghost")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "ghost" in err.value.details()


async def test_a_card_says_who_set_it_and_a_dreams_card_names_its_dream(channel, settings):
    # an auditor could not tell a client's IDENTITY entry from one a dream and its model wrote
    from services.events import ProducerInfo
    from tests.support.observations import append

    c = Client(channel)
    await c.setup_conversation("w", "s")
    client_set = await set_card(c, ["IDENTITY: Bob, a nurse in Oslo"])
    assert client_set.card.producer.component == "api" and client_set.card.dream_id == ""
    dreamer = ProducerInfo(component="dreamer", version="1", model="test-model", prompt_version="card-v1")
    token = append(
        settings,
        [
            PeerCardUpdated(
                workspace_id="w",
                observer_id="alice",
                observed_id="bob",
                entries=("IDENTITY: Bob, a nurse in Oslo", "ATTRIBUTE: keeps bees"),
                replaces=("IDENTITY: Bob, a nurse in Oslo",),
                causation_id="dream-1",
                producer=dreamer,
            )
        ],
    )
    got = await get_card(c, token=token)
    assert list(got.entries)[-1] == "ATTRIBUTE: keeps bees"
    assert (got.producer.component, got.producer.model, got.producer.prompt_version) == (
        "dreamer",
        "test-model",
        "card-v1",
    )
    assert got.dream_id == "dream-1"
