"""Where the log ends: peerlog's topics, their partitions and each partition's high watermark.

A reader checks a consistency token against it, so a token that no write of ours can have made (a topic
that is not peerlog's, a partition that does not exist, an offset beyond the end) is refused at once
instead of being held for the whole consistency wait.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from confluent_kafka import Consumer, KafkaException, TopicPartition

from services.bus.consistency import ConsistencyToken, InvalidConsistencyToken
from services.bus.settings import KafkaSettings
from services.bus.topics import ALL_TOPICS

log = logging.getLogger(__name__)
T = TypeVar("T")
_TOPICS = "topics"  # the key of the metadata request among the in-flight ones (the others: a partition)


def _shown(text: str) -> str:
    return text if len(text) <= 60 else text[:60] + "…"


class LogEnds:
    """Cached topic metadata and high watermarks, refreshed only when a token points past them.

    A token from a real write is below the cached end almost always, so the common check costs no
    broker call. When the broker cannot answer, or not by the caller's deadline, the check lets the token
    through: the wait then decides, as it did before there was a check.
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
        # rather than taking the default executor's threads from the rest of the API; at most one request
        # per partition (and one for the metadata) is queued or running, shared by all who need it
        self._io = ThreadPoolExecutor(1, thread_name_prefix="log-ends")
        self._in_flight: dict[Hashable, Future] = {}

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
        if not await asyncio.wrap_future(self._request(_TOPICS, self._listed)):
            return False
        missing = sorted(self._names - set(self._partitions))
        if missing and not self._said_missing:
            log.warning("topics %s do not exist: run `peerlog topics create`, or check the prefix", ", ".join(missing))
        self._said_missing = bool(missing)
        return not missing

    def check_topics(self, token: ConsistencyToken) -> None:
        """Raise InvalidConsistencyToken if `token` names a topic that is not one of this server's."""
        for topic, _ in token.offsets:
            if topic not in self._names:
                raise InvalidConsistencyToken(
                    f"consistency token names topic {_shown(topic)!r}, which is not one of this server's; "
                    "pass back the token a write returned"
                )

    async def check(self, token: ConsistencyToken, deadline: float = math.inf) -> None:
        """Raise InvalidConsistencyToken if some position of `token` can never be reached. What the broker
        does not answer by the monotonic `deadline` is not checked, as when it cannot answer at all."""
        self.check_topics(token)
        for (topic, partition), offset in token.offsets.items():
            count = await self._partition_count(topic, partition, deadline)
            if count is None:  # not known to exist: asking its end would only queue a request per such partition
                continue
            if partition >= count:
                raise InvalidConsistencyToken(
                    f"consistency token names partition {partition} of {topic!r}, which has {count}; "
                    "pass back the token a write returned"
                )
            end = await self._end(topic, partition, offset, deadline)
            if end is not None and offset >= end:
                raise InvalidConsistencyToken(
                    # not how far the log goes: the partition is every workspace's, and its end tells how much
                    # the others write
                    f"consistency token names offset {offset} of {topic!r} partition {partition}, beyond the "
                    "log's end; pass back the token a write returned"
                )

    async def _partition_count(self, topic: str, partition: int, deadline: float = math.inf) -> int | None:
        """The topic's partition count; None if the broker cannot tell by `deadline`."""
        known = self._partitions.get(topic, 0)
        # partitions can be added to a topic; relist on a miss, but not for every call of a flood
        if partition >= known and time.monotonic() - self._listed_at >= self._relist_every_s:
            if not await self._answer(_TOPICS, deadline, self._listed):
                return None
            known = self._partitions.get(topic, 0)
        # none known: peerlog's topics exist, so the metadata said nothing of this one (a topic just made
        # whose leader is not elected yet, listed with an error): no reason to refuse a token from a write
        return known or None

    async def _end(self, topic: str, partition: int, offset: int, deadline: float = math.inf) -> int | None:
        """The partition's end, fetched again when `offset` is at or past the cached one; None if the broker
        cannot tell by `deadline`."""
        key = (topic, partition)
        asked = time.monotonic()
        while offset >= self._ends.get(key, 0):
            answer = await self._answer(key, deadline, self._fetch_end, topic, partition)
            if answer is None or answer[1] is None:
                return None
            began, end = answer
            self._ends[key] = max(end, self._ends.get(key, 0))
            if began >= asked:
                break
            # a request shared with an earlier check, sent perhaps before the write that made this token was
            # acknowledged: too old to refuse it, so ask once more (that request begins after this check did)
        return self._ends.get(key, 0)

    def _fetch_end(self, topic: str, partition: int) -> tuple[float, int | None]:
        """When the request began, and the partition's high watermark (None if the broker did not answer)."""
        began = time.monotonic()
        try:
            marks = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), self._timeout_s, False)
        except KafkaException:
            return began, None
        return began, None if marks is None else marks[1]  # None: timed out

    def _listed(self) -> bool:
        """list_topics; False if the broker did not answer."""
        try:
            self.list_topics()
        except KafkaException:
            return False
        return True

    def _request(self, key: Hashable, fn: Callable[..., T], *args) -> Future[T]:
        """The broker request for `key` in flight, else a new one: concurrent checks of one partition share
        it instead of each queueing its own behind the others on the one thread."""
        running = self._in_flight.get(key)
        if running is None or running.done():
            running = self._in_flight[key] = self._io.submit(fn, *args)
        return running

    async def _answer(self, key: Hashable, deadline: float, fn: Callable[..., T], *args) -> T | None:
        """The answer of the request for `key` (see _request); None if it is not there by `deadline`. Only
        this caller stops waiting: the request goes on for the others and the next check."""
        left = None if deadline == math.inf else deadline - time.monotonic()
        if left is not None and left <= 0:  # too late to use an answer: ask nothing
            return None
        answered = asyncio.wrap_future(self._request(key, fn, *args))
        await asyncio.wait({answered}, timeout=left)
        if not answered.done() or answered.cancelled():  # cancelled: closed meanwhile
            return None
        return answered.result()

    def close(self) -> None:
        self._io.shutdown(wait=True, cancel_futures=True)  # what is still queued has no one left to answer
        self._consumer.close()
