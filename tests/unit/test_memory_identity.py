"""A gateway user's peer id: one's own, whatever the platform's id looks like. Cleaning an id into the
server's alphabet is lossy, so an id it changes gets a hash of the raw id; an id already clean keeps
its peer exactly."""

from __future__ import annotations

import re

import pytest

from peerlog_client.memory.config import validate
from peerlog_client.memory.identity import Sender, a2a_session, distinct_id, user_peer

VALID_ID = re.compile(r"[A-Za-z0-9_-]{1,512}")


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("ada@smith.example.com", "ada.smith@example.com"),  # both clean to ada-smith-example-com
        ("-123", "123"),  # stripping the dash made them one
        ("a b", "a  b"),
        ("x" * 600, "x" * 601),  # cut at 512 characters
    ],
)
def test_two_users_whose_ids_clean_alike_get_two_peers(one, other):
    config = validate([("t", {"peerName": "me"})])
    peers = {user_peer(config, Sender(one)), user_peer(config, Sender(other))}
    assert len(peers) == 2 and all(VALID_ID.fullmatch(p) for p in peers)
    prefixed = validate([("t", {"peerName": "me", "runtimePeerPrefix": "tg_"})])
    assert user_peer(prefixed, Sender(one)) != user_peer(prefixed, Sender(other))
    assert user_peer(config, Sender(one, is_bot=True)) != user_peer(config, Sender(other, is_bot=True))


@pytest.mark.parametrize("clean", ["7654321", "ada_king", "Ada-King-42", "x" * 512])
def test_an_id_already_clean_keeps_its_peer_exactly(clean):
    config = validate([("t", {"peerName": "me"})])
    assert user_peer(config, Sender(clean)) == clean
    assert user_peer(validate([("t", {"runtimePeerPrefix": "tg_"})]), Sender(clean[:500])) == f"tg_{clean[:500]}"
    assert user_peer(config, Sender("helper", is_bot=True)) == "bot-helper"


def test_a_cleaned_id_is_stable_readable_and_its_a2a_session_valid():
    peer = distinct_id("ada.smith@example.com")
    assert peer == distinct_id("ada.smith@example.com")  # the same peer on every run
    assert peer.startswith("ada-smith-example-com-")
    assert VALID_ID.fullmatch(a2a_session(peer))
    assert VALID_ID.fullmatch(distinct_id("@@@")) and VALID_ID.fullmatch(distinct_id("pasted \ud83d"))
