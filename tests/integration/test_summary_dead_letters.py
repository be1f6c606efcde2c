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
