"""Where the log ends: peerlog's topics, their partitions and each partition's high watermark.

A reader checks a consistency token against it, so a token that no write of ours can have made (a topic
that is not peerlog's, a partition that does not exist, an offset beyond the end) is refused at once
instead of being held for the whole consistency wait.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import Consumer, KafkaException, TopicPartition

from services.bus.consistency import ConsistencyToken, InvalidConsistencyToken
from services.bus.settings import KafkaSettings
from services.bus.topics import ALL_TOPICS

log = logging.getLogger(__name__)


def _shown(text: str) -> str:
    return text if len(text) <= 60 else text[:60] + "…"


class LogEnds:
    """Cached topic metadata and high watermarks, refreshed only when a token points past them.

    A token from a real write is below the cached end almost always, so the common check costs no
    broker call. When the broker cannot answer, the check lets the token through: the wait that follows
    then decides, as it did before there was a check.
    """

    def __init__(self, settings: KafkaSettings, timeout_s: float = 2.0, relist_every_s: float = 1.0) -> None:
        self._names = frozenset(spec.full_name(settings.topic_prefix) for spec in ALL_TOPICS)
        self._said_missing = False  # whether the topics missing were logged (once, until they are there)
        # no group is ever joined: the consumer only asks for metadata and watermarks. Read uncommitted,
        # so the end is the high watermark, which an acknowledged write (acks=all) is always below; the
        # last stable offset can trail a committed transaction until its markers are written
        self._consumer = Consumer(
            {
                **settings.client_config(),
                "group.id": f"{settings.topic_prefix}api-log-ends",
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
            }
        )
        self._timeout_s = timeout_s
        self._relist_every_s = relist_every_s
        self._listed_at = float("-inf")
        self._partitions: dict[str, int] = {}
        self._ends: dict[tuple[str, int], int] = {}
        # one thread: librdkafka calls on one handle stay serial, and a flood of bad tokens queues here
        # rather than taking the default executor's threads from the rest of the API
        self._io = ThreadPoolExecutor(1, thread_name_prefix="log-ends")

    def list_topics(self) -> None:
        """Load the partition count of every peerlog topic (raises KafkaException if the broker is away)."""
        meta = self._consumer.list_topics(timeout=self._timeout_s)
        self._listed_at = time.monotonic()
        self._partitions = {
            name: len(meta.topics[name].partitions)
            for name in self._names
            if name in meta.topics and meta.topics[name].error is None
        }

    async def reachable(self) -> bool:
        """Whether the broker answers a metadata request now and holds every peerlog topic (for the health
        check): without its topics (`peerlog serve` before `peerlog topics create`, or another
        PEERLOG_KAFKA_TOPIC_PREFIX) the API said SERVING, and every write timed out "may be on the log"."""
        try:
            await self._run(self.list_topics)
        except KafkaException:
            return False
        missing = sorted(self._names - set(self._partitions))
        if missing and not self._said_missing:
            log.warning("topics %s do not exist: run `peerlog topics create`, or check the prefix", ", ".join(missing))
        self._said_missing = bool(missing)
        return not missing

    async def check(self, token: ConsistencyToken) -> None:
        """Raise InvalidConsistencyToken if some position of `token` can never be reached."""
        for (topic, partition), offset in token.offsets.items():
            if topic not in self._names:
                raise InvalidConsistencyToken(
                    f"consistency token names topic {_shown(topic)!r}, which is not one of this server's; "
                    "pass back the token a write returned"
                )
            count = await self._partition_count(topic, partition)
            if count is not None and partition >= count:
                raise InvalidConsistencyToken(
                    f"consistency token names partition {partition} of {topic!r}, which has {count}; "
                    "pass back the token a write returned"
                )
            end = await self._end(topic, partition, offset)
            if end is not None and offset >= end:
                raise InvalidConsistencyToken(
                    # not how far the log goes: the partition is every workspace's, and its end tells how much
                    # the others write
                    f"consistency token names offset {offset} of {topic!r} partition {partition}, beyond the "
                    "log's end; pass back the token a write returned"
                )

    async def _partition_count(self, topic: str, partition: int) -> int | None:
        """The topic's partition count; None if the broker cannot tell."""
        known = self._partitions.get(topic, 0)
        # partitions can be added to a topic; relist on a miss, but not for every call of a flood
        if partition >= known and time.monotonic() - self._listed_at >= self._relist_every_s:
            try:
                await self._run(self.list_topics)
            except KafkaException:
                return None
            known = self._partitions.get(topic, 0)
        # none known: peerlog's topics exist, so the metadata said nothing of this one (a topic just made
        # whose leader is not elected yet, listed with an error): no reason to refuse a token from a write
        return known or None

    async def _end(self, topic: str, partition: int, offset: int) -> int | None:
        """The partition's end, fetched again when `offset` is at or past the cached one; None if unknown."""
        end = self._ends.get((topic, partition), 0)
        if offset < end:
            return end
        try:
            marks = await self._run(
                self._consumer.get_watermark_offsets, TopicPartition(topic, partition), self._timeout_s, False
            )
        except KafkaException:
            return None
        if marks is None:  # timed out
            return None
        end = marks[1]
        self._ends[(topic, partition)] = max(end, self._ends.get((topic, partition), 0))
        return end

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    def close(self) -> None:
        self._io.shutdown(wait=True)
        self._consumer.close()
