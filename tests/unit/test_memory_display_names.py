"""A peer's display name is marked as given only once the server took it (or refused it for good): a name
lost to a transient failure is asked for again with the retried send, not lost for good."""

from __future__ import annotations

from unittest.mock import MagicMock, call

import pytest

from peerlog_client.errors import InvalidArgument, Unavailable
from peerlog_client.memory.config import validate
from peerlog_client.memory.provider import MemoryProvider


@pytest.fixture
def provider_and_peer(tmp_path):
    client = MagicMock()
    peer = client.workspace.return_value.peer.return_value  # every peer's handle, here one mock
    peer.info.metadata = peer.refresh.return_value.metadata = {}
    config = validate([("test", {"peerName": "alice", "userDisplayName": "Ada King", "writeFrequency": "turn"})])
    provider = MemoryProvider(config, directory=tmp_path, client=client)
    yield provider, peer, client.workspace.return_value.session.return_value
    provider.close()


def test_a_display_name_lost_to_a_transient_failure_is_given_when_the_send_is_retried(provider_and_peer):
    provider, peer, session = provider_and_peer
    peer.set_metadata.side_effect = [Unavailable("connection reset"), None]
    provider.record_turn("I keep bees", "Lovely!")  # the name fails, so the turn is kept
    assert provider.writer.pending == 2 and not session.add_messages.called
    assert provider.flush()
    assert peer.set_metadata.call_args_list == [call({"name": "Ada King"})] * 2
    assert session.add_messages.call_count == 1


def test_a_display_name_refused_for_good_is_asked_for_once_and_the_turns_go_unnamed(provider_and_peer):
    provider, peer, session = provider_and_peer
    peer.set_metadata.side_effect = InvalidArgument("a name needs a letter or digit")
    provider.record_turn("I keep bees", "Lovely!")
    provider.record_turn("and two cats", "Nice!")
    assert peer.set_metadata.call_count == 1 and provider.stats.failures["name"] == 1
    assert session.add_messages.call_count == 2 and provider.writer.pending == 0


def test_a_display_name_keeps_what_was_stored_on_the_peer_since_this_process_read_it(provider_and_peer):
    provider, peer, session = provider_and_peer
    peer.info.metadata = {}  # what the provider read when it made the handle
    peer.refresh.return_value.metadata = {"tier": "gold"}  # the app stored it since
    provider.record_turn("I keep bees", "Lovely!")
    assert peer.set_metadata.call_args_list == [call({"tier": "gold", "name": "Ada King"})]
