"""The router lets a pair perceive only what its observer could have seen."""

from __future__ import annotations

import pytest

from peerlog.v1 import configuration_pb2, messages_pb2, sessions_pb2
from services.api.channels import aio_channel
from services.api.tokens import mint
from services.bus.topics import PERCEIVED
from services.cli.client import Client
from services.events import MessagePerceived
from tests.support.log import read_events
from tests.support.processes import Worker


@pytest.fixture
def router(settings, tmp_path):

    w = Worker(
        settings,
        tmp_path / "worker.log",
        {"PEERLOG_WORKER_PROCESSORS": "router", "PEERLOG_WORKER_DATA_DIR": str(tmp_path / "faust")},
    ).start()
    yield w
    w.stop()
    print(w.log_text()[-3000:])


def pairs(events) -> list[tuple[str, str, str]]:
    return [(e.observer_id, e.observed_id, e.content) for e in events if isinstance(e, MessagePerceived)]


def member(peer: str, observe_others: bool = False, observe_me: bool | None = None):
    spec = sessions_pb2.MemberSpec(peer_id=peer, observe_others=observe_others)
    if observe_me is not None:
        spec.observe_me = observe_me
    return spec


async def test_what_b_says_without_a_never_reaches_a_and_leaving_stops_the_flow(channel, settings, router):
    c = Client(channel)
    await c.workspace("w")
    for p in ("alice", "bob", "carol"):
        await c.peer("w", p)
    await c.session("w", "with-alice", members=[member("alice", observe_others=True), member("bob")])
    await c.session("w", "without-alice", members=[member("bob"), member("carol", observe_others=True)])

    await c.add("w", "without-alice", [("bob", "my bank pin is 1234")])
    await c.add("w", "with-alice", [("bob", "I like hiking")])
    await c.sessions.RemoveMembers(
        sessions_pb2.RemoveMembersRequest(workspace_id="w", session_id="with-alice", peer_ids=["alice"])
    )
    await c.add("w", "with-alice", [("bob", "I moved to Oslo")])

    seen = pairs(read_events(settings, PERCEIVED, lambda ev: len(pairs(ev)) >= 5, settle=2.0))

    assert sorted(seen) == sorted(
        [
            ("bob", "bob", "my bank pin is 1234"),
            ("carol", "bob", "my bank pin is 1234"),
            ("bob", "bob", "I like hiking"),
            ("alice", "bob", "I like hiking"),
            ("bob", "bob", "I moved to Oslo"),
        ]
    )


async def test_observe_me_settings_decide_whether_a_self_model_is_built(channel, settings, router):
    c = Client(channel)
    await c.workspace("w")
    await c.peer("w", "bot", observe_me=False)
    await c.peer("w", "alice")
    await c.session("w", "s", members=[member("bot"), member("alice", observe_me=False)])
    await c.session("w", "s2", members=[member("bot", observe_me=True)])
    await c.add("w", "s", [("bot", "beep"), ("alice", "hello")])
    await c.add("w", "s2", [("bot", "boop")])

    seen = pairs(read_events(settings, PERCEIVED, lambda ev: len(pairs(ev)) >= 1, settle=3.0))

    # the peer-level "no" holds for bot in s; alice's session-level "no" overrides her peer-level "yes";
    # bot's session-level "yes" in s2 overrides its peer-level "no"
    assert seen == [("bot", "bot", "boop")]


async def test_a_message_sent_with_observe_me_or_observe_others_off_reaches_no_pair_its_members_asked_for(
    channel, settings, router
):
    c = Client(channel)
    await c.workspace("w")
    for p in ("alice", "bob"):
        await c.peer("w", p)
    both_ways = [member(p, observe_others=True, observe_me=True) for p in ("alice", "bob")]
    await c.session("w", "s", members=both_ways)

    def sent(peer, text, **level):
        return messages_pb2.NewMessage(
            peer_id=peer, content=text, configuration=configuration_pb2.Configuration(**level)
        )

    # observe_me=false is one of the two settings alice's own token may put on her messages
    async with aio_channel(channel.address, mint(settings.auth, ["peer:w/alice"])) as as_alice:
        await Client(as_alice).add("w", "s", [sent("alice", "my diagnosis", observe_me=False)])
    await c.add("w", "s", [sent("bob", "my address", observe_others=False), ("bob", "I like tea")])

    seen = pairs(read_events(settings, PERCEIVED, lambda ev: len(pairs(ev)) >= 4, settle=3.0))

    assert sorted(seen) == sorted(
        [
            ("bob", "alice", "my diagnosis"),
            ("bob", "bob", "my address"),
            ("bob", "bob", "I like tea"),
            ("alice", "bob", "I like tea"),
        ]
    )


async def test_each_perceived_message_carries_the_previous_turn_by_another_speaker(channel, settings, router):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    await c.add("w", "s", [("alice", "where do you live?"), ("bob", "in Oslo"), ("bob", "since May")])
    events = read_events(settings, PERCEIVED, lambda ev: len(pairs(ev)) >= 3, settle=1.0)
    by_content = {e.content: e for e in events if isinstance(e, MessagePerceived)}
    assert by_content["in Oslo"].previous_turn.content == "where do you live?"
    assert by_content["since May"].previous_turn.content == "where do you live?"
    assert by_content["where do you live?"].previous_turn is None
    assert [by_content[t].seq for t in ("where do you live?", "in Oslo", "since May")] == [1, 2, 3]
