"""A gateway user's peer id: one's own, whatever the platform's id looks like. Cleaning an id into the
server's alphabet is lossy, so an id it changes gets a hash of the raw id; an id already clean keeps
its peer exactly."""

from __future__ import annotations

import re
from unittest.mock import MagicMock, call

import pytest

from peerlog_client.memory.config import validate
from peerlog_client.memory.identity import BOT_PREFIX, Sender, a2a_session, distinct_id, user_peer
from peerlog_client.memory.provider import MemoryProvider

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


@pytest.mark.parametrize(
    ("keys", "victim"),
    [
        ({}, Sender("ada.smith@example.com")),  # ada-smith-example-com-<hash>
        ({"runtimePeerPrefix": "tg_"}, Sender("ada.smith@example.com")),  # tg_ada-smith-example-com-<hash>
        ({}, Sender("user")),  # peerName's id: human-user-<hash>
        ({}, Sender("assistant")),  # the AI's: human-assistant-<hash>
        ({}, Sender("helper.x", is_bot=True)),  # bot-helper-x-<hash>
        ({"aiPeer": "bot-lumen"}, Sender("lumen", is_bot=True)),  # the AI's form: bot-lumen-<hash>
    ],
)
def test_a_runtime_id_spelled_like_another_users_hashed_peer_gets_a_peer_of_its_own(keys, victim):
    config = validate([("t", keys)])
    peer = user_peer(config, victim)
    form = BOT_PREFIX if victim.is_bot else config.runtime_peer_prefix  # what user_peer puts before the id
    assert peer.startswith(form) and peer != f"{form}{victim.runtime_id}"  # a hashed form: public, deterministic
    impostor = Sender(peer.removeprefix(form), is_bot=victim.is_bot)  # whose id is that string, typed in
    theirs = user_peer(config, impostor)
    assert theirs != peer and VALID_ID.fullmatch(theirs)
    assert theirs == user_peer(config, impostor)  # the same peer on every run


@pytest.mark.parametrize(
    ("keys", "runtime_id", "peer"),
    [
        ({}, "550e8400-e29b-41d4-a716-446655440000", "550e8400-e29b-41d4-a716-446655440000"),  # a UUID
        (
            {"runtimePeerPrefix": "tg_"},
            "550e8400-e29b-41d4-a716-446655440000",
            "tg_550e8400-e29b-41d4-a716-446655440000",
        ),
        ({}, "user-6f1c2a0e-8b3d-4c1e-9a7f-3b5e9a2c1d4f", "user-6f1c2a0e-8b3d-4c1e-9a7f-3b5e9a2c1d4f"),  # ends in one
        ({}, "usr_6f1c2a0e-8b3d-4c1e-9a7f-3b5e9a2c1d4f", "usr_6f1c2a0e-8b3d-4c1e-9a7f-3b5e9a2c1d4f"),
        ({"runtimePeerPrefix": "wa-"}, "447700900123", "wa-447700900123"),  # a phone number after a dash
        ({}, "human-resources", "human-resources"),
        ({}, "order-ABCDEF012345", "order-ABCDEF012345"),  # a hash's hex is lowercase
        ({}, "build-0123456789a", "build-0123456789a"),  # 11 hex digits
    ],
)
def test_ordinary_ids_that_end_a_little_like_a_hash_keep_their_peers(keys, runtime_id, peer):
    assert user_peer(validate([("t", keys)]), Sender(runtime_id)) == peer


def test_a_cleaned_id_is_stable_readable_and_its_a2a_session_valid():
    peer = distinct_id("ada.smith@example.com")
    assert peer == distinct_id("ada.smith@example.com")  # the same peer on every run
    assert peer.startswith("ada-smith-example-com-")
    assert VALID_ID.fullmatch(a2a_session(peer))
    assert VALID_ID.fullmatch(distinct_id("@@@")) and VALID_ID.fullmatch(distinct_id("pasted \ud83d"))


def test_a_human_whose_id_is_the_ai_peers_id_gets_a_peer_of_its_own_and_never_renames_the_ai(tmp_path):
    client = MagicMock()
    peers: dict[str, MagicMock] = {}
    client.workspace.return_value.peer.side_effect = lambda peer_id, **_: peers.setdefault(
        peer_id, MagicMock(**{"info.metadata": {}, "refresh.return_value.metadata": {}})
    )
    session = client.workspace.return_value.session.return_value
    config = validate([("t", {"aiDisplayName": "Lumen", "recallMode": "tools", "writeFrequency": "turn"})])
    memory = MemoryProvider(config, directory=tmp_path, session="tg:42", client=client)
    eve = Sender("assistant", name="Eve")  # the AI's peer is "assistant" by default
    memory.context_for_turn("hi, I'm Eve", sender=eve)
    memory.dispatch("peerlog_profile", {"card": ["IDENTITY: Eve"]})
    memory.record_turn("hi, I'm Eve", "hello Eve", sender=eve)
    memory.close()
    eves = user_peer(config, eve)
    assert eves != "assistant" and VALID_ID.fullmatch(eves)
    sent = session.add_messages.call_args.args[0]
    assert [(m.peer_id, m.content) for m in sent] == [(eves, "hi, I'm Eve"), ("assistant", "hello Eve")]
    assert peers["assistant"].set_metadata.call_args_list == [call({"name": "Lumen"})]  # never "Eve"
    assert peers[eves].set_metadata.call_args_list == [call({"name": "Eve"})]
    # her profile is her card, as the AI sees her: not the AI's own card
    assert peers["assistant"].set_card.call_args_list == [call(["IDENTITY: Eve"], target=eves)]


@pytest.mark.parametrize(
    ("keys", "sender", "taken"),
    [
        ({}, Sender("user"), "user"),  # peerName's (the default peer's memory)
        ({"peerName": "me"}, Sender("me"), "me"),
        ({"runtimePeerPrefix": "tg_", "aiPeer": "tg_1"}, Sender("1"), "tg_1"),  # the AI's, prefix and all
        ({}, Sender("bot-helper"), "bot-helper"),  # the form of the bot whose id is "helper"
        ({}, Sender("bot.helper"), "bot-helper"),
        ({"aiPeer": "bot-lumen"}, Sender("lumen", is_bot=True), "bot-lumen"),  # a bot never becomes the AI
        ({"peerName": "bot-me"}, Sender("me", is_bot=True), "bot-me"),  # nor the default peer
    ],
)
def test_a_sender_whose_id_is_the_default_peers_the_ais_or_a_bots_gets_a_peer_of_its_own(keys, sender, taken):
    config = validate([("t", keys)])
    peer = user_peer(config, sender)
    assert peer not in (taken, config.peer_name, config.ai_peer) and VALID_ID.fullmatch(peer)
    assert peer == user_peer(config, sender)  # the same peer on every run
    assert peer.startswith("bot-") is sender.is_bot  # a human never has a bot's form, so no bot has a human's
    assert user_peer(validate([("t", {**keys, "pinUserPeer": True})]), Sender(sender.runtime_id)) == (
        config.peer_name  # pinned on purpose: every human is the default peer
    )
