"""Drives fuzzed requests at a running peerlog API, one at a time, and checks each against the oracle.

Around every call the harness reads the log's ends; when a refused call moved them, it reads what was
added with read_committed (an aborted transaction does not count: no consumer ever sees it) and flags
committed records. Every few calls it reads the `quarantine` table and pins a new row on the write that
put the record there. Calls run one at a time, so the attribution is exact.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable

import grpc
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as with_seed
from sqlalchemy import text

from peerlog.v1 import (
    common_pb2,
    dreams_pb2,
    messages_pb2,
    observations_pb2,
    peers_pb2,
    sessions_pb2,
    webhooks_pb2,
    workspaces_pb2,
)
from services.api.channels import channel
from services.bus.consistency import ConsistencyToken
from services.events import decode
from tests.fuzz.oracle import Outcome, Tally, judge
from tests.fuzz.rpcs import Rpc, all_rpcs
from tests.fuzz.strategies import Case, Pools, cases

QUARANTINE_EVERY = 20  # calls between reads of the quarantine table
WRITES_KEPT = 400  # accepted writes remembered to pin a quarantined record on


# streams that wait for what is written next and never end by themselves: read for a few seconds, then
# stopped by their deadline, which for them is no stall
ENDLESS_STREAMS = {"/peerlog.v1.EventService/Subscribe"}
ENDLESS_READ_S = 3.0


class Fuzzer:
    def __init__(
        self,
        address: str,
        webhook_url: str,
        bootstrap_servers: str,
        topic_prefix: str,
        topics: Iterable[str],
        engine,
        schema: str,
        alive: Callable[[], str | None] = lambda: None,
        deadline_s: float = 30.0,
        stream_items: int = 5,
        progress: Callable[[str], None] | None = None,
        token: str = "",
    ) -> None:
        """`webhook_url`: a receiver of the fuzz's own, the seeded webhook's target; `topics`: full names of the
        log topics only the API writes while fuzzing (watched for refused writes); `alive()` names a dead part
        of the stack, or returns None; `token`: the bearer token sent."""
        self.channel = channel(address, token)  # default limits: what a default client can receive
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.pools = Pools(topic_prefix, webhook_url)
        self.bootstrap = bootstrap_servers
        self.admin = AdminClient({"bootstrap.servers": bootstrap_servers})
        meta = self.admin.list_topics(timeout=10)
        self.partitions = [(t, p) for t in sorted(topics) for p in sorted(meta.topics[t].partitions)]
        self.engine, self.schema, self.alive = engine, schema, alive
        self.deadline_s, self.stream_items, self.progress = deadline_s, stream_items, progress
        self.tally = Tally()
        self.rpcs = all_rpcs()
        self.written = ConsistencyToken({})
        self.writes: list[tuple[Case, dict[tuple[str, int], tuple[int, int]]]] = []
        self.quarantined: set[tuple[str, int, int]] = set()
        self.calls = 0

    def close(self) -> None:
        self.channel.close()

    # --- the log and the projections
    def log_ends(self) -> dict[tuple[str, int], int]:
        wanted = {TopicPartition(t, p): OffsetSpec.latest() for t, p in self.partitions}
        futures = self.admin.list_offsets(wanted, request_timeout=10)
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

    def committed_between(self, before: dict, after: dict) -> list[str]:
        """Types of the committed events at offsets [before, after) of each moved partition."""
        moved = [(tp, before[tp], after[tp]) for tp in after if after[tp] > before.get(tp, 0)]
        if not moved:
            return []
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"fuzz-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition(t, p, lo) for (t, p), lo, _ in moved])
        found: list[str] = []
        deadline = time.monotonic() + 10
        try:
            while time.monotonic() < deadline:
                for msg in consumer.consume(500, 0.2):
                    if msg.error() is None and msg.offset() < after[(msg.topic(), msg.partition())]:
                        found.append(f"{msg.topic()}:{msg.partition()}:{msg.offset()} {decode(msg.value()).type}")
                positions = consumer.position([TopicPartition(t, p) for (t, p), _, _ in moved])
                if all(p.offset >= after[(p.topic, p.partition)] for p in positions):
                    break
        finally:
            consumer.close()
        return found

    def check_quarantine(self) -> None:
        with self.engine.connect() as conn:
            rows = conn.execute(text(f'SELECT topic, partition, "offset", reason FROM "{self.schema}".quarantine'))
            rows = rows.all()
        for topic, partition, offset, reason in rows:
            if (topic, partition, offset) in self.quarantined:
                continue
            self.quarantined.add((topic, partition, offset))
            culprit = next(
                (
                    case
                    for case, ranges in reversed(self.writes)
                    if ranges.get((topic, partition), (0, 0))[0] <= offset < ranges.get((topic, partition), (0, 0))[1]
                ),
                None,
            )
            self.tally.violation(
                "a record the API accepted was quarantined",
                culprit,
                None,
                {"record": f"{topic}:{partition}:{offset}", "reason": reason[:300]},
            )

    def check_alive(self) -> None:
        dead = self.alive()
        if dead is None:
            try:
                reply = self.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
                dead = None if reply.status == health_pb2.HealthCheckResponse.SERVING else "health: NOT_SERVING"
            except grpc.RpcError as err:
                dead = f"health: {err.code().name} {err.details()}"
        if dead is not None:
            self.tally.violation("the stack is down", None, None, {"what": dead})
            raise RuntimeError(f"the stack is down after {self.calls} calls: {dead}")

    # --- calls
    def send(self, rpc: Rpc, data: bytes) -> Outcome:
        started, endless = time.monotonic(), rpc.path in ENDLESS_STREAMS
        try:
            if not rpc.streaming:
                raw, _ = self.channel.unary_unary(rpc.path).with_call(data, timeout=self.deadline_s)
                return Outcome(
                    grpc.StatusCode.OK, "", time.monotonic() - started, reply=rpc.response_class().FromString(raw)
                )
            # a stream is read for a few items, then cut: the deadline bounds a stream that never ends
            call = self.channel.unary_stream(rpc.path)(data, timeout=ENDLESS_READ_S if endless else self.deadline_s)
            items = 0
            for _ in call:
                items += 1
                if items >= self.stream_items:
                    call.cancel()
                    break
            return Outcome(grpc.StatusCode.OK, "", time.monotonic() - started, items)
        except grpc.RpcError as err:
            if endless and err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:  # how an endless stream stops
                return Outcome(grpc.StatusCode.OK, "", time.monotonic() - started, items)
            return Outcome(err.code(), err.details() or "", time.monotonic() - started)

    def check(self, case: Case) -> Outcome | None:
        """Send one request and judge it; None when it could not be encoded on this side."""
        try:
            data = case.encode()
        except Exception as exc:  # e.g. a Struct too deep for the client's own encoder
            self.tally.skipped[f"{type(exc).__name__}: {str(exc)[:80]}"] += 1
            return None
        before = self.log_ends()
        outcome = self.send(case.rpc, data)
        after = self.log_ends()
        self.calls += 1
        self.tally.record(case, outcome)
        for kind in judge(case, outcome, len(data)):
            self.tally.violation(kind, case, outcome, {"request_bytes": len(data)})
        moved = {tp: (before.get(tp, 0), after[tp]) for tp in after if after[tp] != before.get(tp, 0)}
        if outcome.code == grpc.StatusCode.OK:
            self.accepted(case, outcome, moved)
        elif moved:
            committed = self.committed_between(before, after)
            if committed:
                self.tally.violation(
                    "a refused call reached the log",
                    case,
                    outcome,
                    {"records": committed[:5], "record_count": len(committed)},
                )
        if outcome.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
            self.check_alive()
        if self.calls % QUARANTINE_EVERY == 0:
            self.check_quarantine()
            self.check_alive()
        if self.progress is not None and self.calls % 500 == 0:
            self.progress(f"{self.calls} calls, {sum(self.tally.violations.values())} violations")
        return outcome

    def accepted(self, case: Case, outcome: Outcome, moved: dict) -> None:
        if outcome.reply is not None:
            self.pools.harvest(outcome.reply)
            token = getattr(outcome.reply, "consistency_token", "")
            if token and case.rpc.method not in ("GetContext",):
                try:
                    self.written = self.written.merge(ConsistencyToken.decode(token))
                except ValueError:
                    pass
        if moved:
            self.writes = (self.writes + [(case, moved)])[-WRITES_KEPT:]

    # --- the run
    def seed(self) -> None:
        """A little real data, so plausible requests find workspaces, peers, messages and observations."""

        def call(rpc_name: str, request) -> Message:
            rpc = next(r for r in self.rpcs if r.name == rpc_name)
            outcome = self.send(rpc, request.SerializeToString())
            assert outcome.code == grpc.StatusCode.OK, f"seeding {rpc_name}: {outcome.code} {outcome.details}"
            self.pools.harvest(outcome.reply)
            return outcome.reply

        read = lambda token: common_pb2.ReadConsistency(consistency_token=token)  # noqa: E731
        page = common_pb2.PageRequest(page_size=1)
        for ws in ("fz", "fz-b"):
            call("WorkspaceService.GetOrCreateWorkspace", workspaces_pb2.GetOrCreateWorkspaceRequest(workspace_id=ws))
            for peer in ("alice", "bob", "carol"):
                call("PeerService.GetOrCreatePeer", peers_pb2.GetOrCreatePeerRequest(workspace_id=ws, peer_id=peer))
        for sid, members in (("s1", ("alice", "bob")), ("s2", ("bob", "carol"))):
            call(
                "SessionService.GetOrCreateSession",
                sessions_pb2.GetOrCreateSessionRequest(
                    workspace_id="fz", session_id=sid, members=[sessions_pb2.MemberSpec(peer_id=m) for m in members]
                ),
            )
        sent = call(
            "MessageService.AddMessages",
            messages_pb2.AddMessagesRequest(
                workspace_id="fz",
                session_id="s1",
                messages=[
                    messages_pb2.NewMessage(peer_id="bob", content="I keep bees in my garden"),
                    messages_pb2.NewMessage(peer_id="alice", content="cool"),
                    messages_pb2.NewMessage(peer_id="bob", content="I moved to Oslo last year"),
                ],
            ),
        )
        call(
            "MessageService.ListMessages",
            messages_pb2.ListMessagesRequest(
                workspace_id="fz", session_id="s1", page=page, consistency=read(sent.consistency_token)
            ),
        )
        made = call(
            "ObservationService.CreateObservations",
            observations_pb2.CreateObservationsRequest(
                workspace_id="fz",
                observer_id="alice",
                observed_id="bob",
                observations=[
                    observations_pb2.NewObservation(
                        content="Bob keeps bees",
                        session_id="s1",
                        sources=[
                            observations_pb2.ObservationSource(message_id=sent.message_ids[0], span="I keep bees")
                        ],
                    )
                ],
            ),
        )
        call(
            "PeerService.SetPeerCard",
            peers_pb2.SetPeerCardRequest(
                workspace_id="fz",
                observer_id="alice",
                observed_id="bob",
                entries=["ATTRIBUTE: keeps bees", "IDENTITY: Bob"],
            ),
        )
        call(
            "DreamService.ScheduleDream",
            dreams_pb2.ScheduleDreamRequest(
                workspace_id="fz", observer_id="alice", observed_id="bob", reason="fuzz seed"
            ),
        )
        call(
            "ObservationService.ListObservations",
            observations_pb2.ListObservationsRequest(
                workspace_id="fz",
                observer_id="alice",
                observed_id="bob",
                page=page,
                consistency=read(made.consistency_token),
            ),
        )
        # a webhook, so its RPCs are fuzzed past the lookup of the webhook they name
        call(
            "WebhookService.CreateWebhook",
            webhooks_pb2.CreateWebhookRequest(
                workspace_id="fz", url=self.pools.webhook_url, event_types=["SessionCreated"]
            ),
        )
        call("WorkspaceService.ListWorkspaces", workspaces_pb2.ListWorkspacesRequest(page=page))
        call("PeerService.ListPeers", peers_pb2.ListPeersRequest(workspace_id="fz", page=page))
        call("SessionService.ListSessions", sessions_pb2.ListSessionsRequest(workspace_id="fz", page=page))
        call(
            "DreamService.ListDreams",
            dreams_pb2.ListDreamsRequest(workspace_id="fz", observer_id="alice", observed_id="bob"),
        )

    def settle(self) -> None:
        """Wait until the projector has read every accepted write, then look at the quarantine a last time."""
        rpc = next(r for r in self.rpcs if r.name == "WorkspaceService.ListWorkspaces")
        token = self.written.encode()
        request = workspaces_pb2.ListWorkspacesRequest(consistency=common_pb2.ReadConsistency(consistency_token=token))
        outcome = self.send(rpc, request.SerializeToString())
        if outcome.code != grpc.StatusCode.OK:
            self.tally.violation(
                "the projector did not catch up with the accepted writes",
                None,
                outcome,
                {"status": outcome.code.name, "message": outcome.details[:300]},
            )
        self.check_quarantine()
        self.check_alive()

    def run(self, examples: int, seed: int | None = None, excluded: Iterable[str] = ()) -> dict:
        """Send about `examples` fuzzed requests, the same number for every RPC (derandomized unless
        `seed` is given)."""
        excluded, started = tuple(excluded), time.monotonic()
        for rpc in self.rpcs:
            self.fuzz(rpc, max(1, round(examples / len(self.rpcs))), seed, excluded)
        self.settle()
        return {
            "elapsed_s": round(time.monotonic() - started, 1),
            "excluded_input_classes": list(excluded),
            **self.tally.result(),
        }

    def fuzz(self, rpc: Rpc, examples: int, seed: int | None, excluded: tuple[str, ...]) -> None:
        # one hypothesis run per RPC: every RPC gets its share, and each run's choices stay its own
        @settings(
            max_examples=examples,
            derandomize=seed is None,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
            verbosity=Verbosity.quiet,
        )
        @given(cases(rpc, self.pools, excluded))
        def one(case: Case) -> None:
            self.check(case)

        if seed is not None:
            one = with_seed(seed)(one)
        one()
