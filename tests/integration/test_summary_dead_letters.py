"""Summary dead letters (issue 17 §2.9) are shown by GetProcessingStatus until a summary of their session
and kind is written after them."""

from __future__ import annotations

from services.bus.producer import EventLog
from services.cli.client import Client
from services.events import ProducerInfo, SummaryDeadLettered, SummaryKind, SummaryUpdated

P = ProducerInfo(component="test", version="0")


async def test_a_dead_lettered_summary_is_in_the_processing_status_until_its_session_is_summarised_again(
    channel, settings
):
    c = Client(channel)
    await c.setup_conversation("acme", "s1")
    await c.session("acme", "s2", members=["alice"])
    log = EventLog(settings.kafka)
    log.start()
    try:
        token = await log.append(
            [
                SummaryDeadLettered(
                    workspace_id="acme",
                    session_id="s1",
                    kind=SummaryKind.SHORT,
                    last_seq=20,
                    error="model timed out",
                    attempts=3,
                    producer=P,
                )
            ]
        )
        status = await c.processing_status("acme", token.encode())
        assert [
            (d.session_id, d.error, d.attempts, d.HasField("failed_at")) for d in status.dead_lettered_summaries
        ] == [("s1", "model timed out", 3, True)]
        assert not (await c.processing_status("acme", token.encode(), session_id="s2")).dead_lettered_summaries

        def summary(kind: SummaryKind) -> SummaryUpdated:
            return SummaryUpdated(
                workspace_id="acme",
                session_id="s1",
                kind=kind,
                content="they met",
                last_message_id="m",
                last_seq=20,
                messages_covered=20,
                token_count=3,
                model="m",
                prompt_version="1",
                producer=P,
            )

        # a long summary written since does not stand for the short one that failed
        token = await log.append([summary(SummaryKind.LONG)])
        assert len((await c.processing_status("acme", token.encode())).dead_lettered_summaries) == 1
        token = await log.append([summary(SummaryKind.SHORT)])
        assert not (await c.processing_status("acme", token.encode())).dead_lettered_summaries
    finally:
        log.close()


async def test_a_removed_peers_status_shows_no_summary_failure_from_after_it_left(channel, settings):
    # before: its token was told the session went on without it, how far (a short summary fails after
    # 20 more turns) and when
    from datetime import UTC, datetime

    from peerlog.v1 import sessions_pb2
    from services.api.channels import aio_channel
    from services.api.tokens import mint
    from services.events import MessagePerceived
    from tests.support.wait import every_write

    c = Client(channel)
    await c.setup_conversation("w", "s1", peers=("alice", "bob"))
    (hers,) = (await c.add("w", "s1", [("alice", "hello")])).message_ids
    log = EventLog(settings.kafka)
    log.start()
    try:
        while_there = await log.append([_failed_summary(last_seq=1)])
        perceived = MessagePerceived(
            workspace_id="w",
            observer_id="alice",
            observed_id="alice",
            session_id="s1",
            message_id=hers,
            seq=1,
            content="hello",
            created_at=datetime.now(UTC),
            producer=P,
        )
        seen = await log.append([perceived])
        await Client(channel).list_messages("w", "s1", while_there.encode())
        await c.sessions.RemoveMembers(
            sessions_pb2.RemoveMembersRequest(workspace_id="w", session_id="s1", peer_ids=["alice"])
        )
        await c.add("w", "s1", [("bob", f"after alice left {i}") for i in range(30)])
        token = await log.append([_failed_summary(last_seq=31)])
    finally:
        log.close()
    async with aio_channel(channel.address, mint(settings.auth, ["peer:w/alice"])) as chan:
        status = await Client(chan).processing_status(
            "w", every_write(token.encode(), seen.encode()), observer_id="alice"
        )
    assert len(status.dead_lettered_summaries) == 1  # the failure while alice was there
    whole = await Client(channel).processing_status("w", token.encode())
    assert len(whole.dead_lettered_summaries) == 2  # the workspace's status keeps both


def _failed_summary(last_seq: int) -> SummaryDeadLettered:
    return SummaryDeadLettered(
        workspace_id="w",
        session_id="s1",
        kind=SummaryKind.SHORT,
        last_seq=last_seq,
        error="ModelUnavailable (HTTP 503)",
        attempts=3,
        producer=P,
    )
