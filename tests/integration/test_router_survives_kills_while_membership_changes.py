"""The router SIGKILLed again and again while members join and leave: each message is perceived exactly once,
by exactly the members the session had at its place in the log."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from peerlog.v1 import sessions_pb2
from services.bus.topics import PERCEIVED
from services.cli.client import Client
from services.events import MessagePerceived, decode
from tests.support.processes import Worker

SESSIONS = ("s0", "s1", "s2")
# the identity each restart comes back under: the same one (it fences the dead process's transaction at once)
# and a new one (the dead one's partitions and open transaction wait for the broker to give them up)
RESTARTS = ("r", "r2", "r2")
TOGGLE_EVERY = 3  # every third message of a session, carol leaves it or joins it again


# a restarted router's start-up (imports, group join, a new identity's wait for the old one's timeouts) is
# inside each wait: 11-13 s at load 19, and a worker took 49 s to start under such load
STEP_S = 180.0


class Perceived:
    """The router's committed output so far, read as the deriver reads it (read_committed)."""

    def __init__(self, settings) -> None:
        topic = PERCEIVED.full_name(settings.kafka.topic_prefix)
        self.consumer = Consumer(
            {
                "bootstrap.servers": settings.kafka.bootstrap_servers,
                "group.id": f"reader-{uuid.uuid4().hex}",  # assigned, not subscribed: never joins a group
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        partitions = self.consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        self.pairs: Counter[tuple[str, str, str]] = Counter()

    def read(self) -> Counter[tuple[str, str, str]]:
        """Every perception committed so far, as (observer, observed, content) counts."""
        while True:
            batch = self.consumer.consume(500, 0.2)
            for msg in batch:
                event = decode(msg.value()) if msg.error() is None else None
                if isinstance(event, MessagePerceived):
                    self.pairs[(event.observer_id, event.observed_id, event.content)] += 1
            if len(batch) < 500:
                return self.pairs

    async def until(self, done, timeout: float = 60.0) -> bool:
        """Whether `done(pairs)` came to hold within `timeout` seconds."""
        try:
            async with asyncio.timeout(timeout):
                while not done(await asyncio.to_thread(self.read)):
                    pass
        except TimeoutError:
            return False
        return True


class Conversation:
    """Bob talks in every session while carol leaves and rejoins; what each message should reach is written
    down as it is sent, from the membership the log holds at that point."""

    def __init__(self, client: Client) -> None:
        self.c = client
        self.sent = 0
        self.carol_in = dict.fromkeys(SESSIONS, True)
        self.expected: Counter[tuple[str, str, str]] = Counter()

    async def round(self) -> None:
        for s in SESSIONS:
            self.sent += 1
            text = f"{s}-{self.sent}"
            await self.c.add("w", s, [("bob", text)])
            # bob's self-model; alice and carol observe the others
            self.expected.update([("bob", "bob", text), ("alice", "bob", text)])
            if self.carol_in[s]:
                self.expected[("carol", "bob", text)] += 1
            if self.sent % TOGGLE_EVERY == 0:
                await self.toggle_carol(s)

    async def toggle_carol(self, s: str) -> None:
        if self.carol_in[s]:
            await self.c.sessions.RemoveMembers(
                sessions_pb2.RemoveMembersRequest(workspace_id="w", session_id=s, peer_ids=["carol"])
            )
        else:
            await self.c.sessions.AddMembers(
                sessions_pb2.AddMembersRequest(workspace_id="w", session_id=s, members=[member("carol", True)])
            )
        self.carol_in[s] = not self.carol_in[s]


def member(peer: str, observe_others: bool = False) -> sessions_pb2.MemberSpec:
    return sessions_pb2.MemberSpec(peer_id=peer, observe_others=observe_others)


def routed_after(sent: int):
    """True once a message numbered past `sent` was perceived: the router started after it was sent routes."""
    return lambda pairs: any(int(text.rsplit("-", 1)[1]) > sent for _, _, text in pairs)


async def test_a_router_killed_while_members_join_and_leave_perceives_each_message_once_for_exactly_its_members(
    channel, settings, tmp_path
):
    env = {
        "PEERLOG_WORKER_PROCESSORS": "router",
        "PEERLOG_WORKER_DATA_DIR": str(tmp_path / "data"),
        "PEERLOG_WORKER_INSTANCE_ID": "r",
        # a restart under a new identity waits for the broker to abort the dead one's transaction
        "PEERLOG_KAFKA_TRANSACTION_TIMEOUT_MS": "10000",
    }
    c = Client(channel)
    await c.workspace("w")
    for p in ("alice", "bob", "carol"):
        await c.peer("w", p)
    for s in SESSIONS:
        await c.session("w", s, members=[member("alice", True), member("bob"), member("carol", True)])
    talk, perceived = Conversation(c), Perceived(settings)
    router = Worker(settings, tmp_path / "router.log", env).start()

    async def kill_each_router_once_it_routes() -> None:
        nonlocal router
        started_after = 0
        for identity in RESTARTS:
            assert await perceived.until(routed_after(started_after), STEP_S), (
                f"nothing sent after {started_after} routed"
            )
            router.kill()
            started_after = talk.sent  # the dead router perceived nothing sent from here on
            router = Worker(settings, tmp_path / "router.log", {**env, "PEERLOG_WORKER_INSTANCE_ID": identity})
            router.start()
        assert await perceived.until(routed_after(started_after), STEP_S), f"nothing sent after {started_after} routed"

    killing = asyncio.create_task(kill_each_router_once_it_routes())
    try:
        while not killing.done():  # members join and leave for as long as routers are being killed
            await talk.round()
            await asyncio.sleep(0.05)
        await killing
        await talk.round()  # routed by the last router alone, from the state it restored
        # short of the total by the timeout: the comparison below names what is missing
        if await perceived.until(lambda pairs: sum(pairs.values()) >= sum(talk.expected.values())):
            await asyncio.sleep(3)  # a duplicate committed late would land here
        got = await asyncio.to_thread(perceived.read)
    finally:
        killing.cancel()
        router.stop()
        perceived.consumer.close()
        print(router.log_text()[-3000:])
    print(f"{talk.sent} messages, {sum(talk.expected.values())} perceptions expected")
    assert got - talk.expected == Counter(), "perceived more than once, or by a non-member"
    assert talk.expected - got == Counter(), "a member's perception lost"
