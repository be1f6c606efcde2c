"""A read's check of its consistency token against the log's end keeps to the consistency wait, and the
checks of one partition share one broker request: with the real LogEnds and Freshness, the broker faked
at the consumer (no Kafka)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from services.api.freshness import Freshness
from services.bus.consistency import ConsistencyToken, InvalidConsistencyToken
from services.bus.log_ends import LogEnds
from services.bus.settings import KafkaSettings
from services.bus.topics import SESSIONS
from services.errors import Unavailable

KAFKA = KafkaSettings(bootstrap_servers="127.0.0.1:1", topic_prefix="t.")
TOPIC = SESSIONS.full_name(KAFKA.topic_prefix)
WAIT_S = 1.0  # PEERLOG_API_CONSISTENCY_WAIT_S


class Broker:
    """The watermark lookups of LogEnds' consumer: each answers an end from `answers` (one per lookup, the
    last repeated) after `delay_s`, or, hung, never within the lookup's timeout. Counts the lookups."""

    def __init__(self, consumer, answers=(1000,), delay_s: float = 0.0, hung: bool = False) -> None:
        self._consumer = consumer
        self._ends = list(answers)
        self._delay_s = delay_s
        self._hung = hung
        self.released = threading.Event()  # set: every lookup still stalled returns at once
        self.began = threading.Event()
        self.asked = 0

    def get_watermark_offsets(self, tp, timeout, cached):
        self.asked += 1
        self.began.set()
        if self._hung:
            self.released.wait(timeout)  # a broker that does not answer: librdkafka gives up at the timeout
            return None
        self.released.wait(self._delay_s)
        end = self._ends.pop(0) if len(self._ends) > 1 else self._ends[0]
        return 0, end

    def close(self) -> None:
        self.released.set()
        self._consumer.close()


class Projector:
    """The projector's positions: every token projected (after one query of `query_s`) or, behind, none."""

    def __init__(self, caught_up: bool = True, query_s: float = 0.05) -> None:
        self._caught_up = caught_up
        self._query_s = query_s

    def passed(self, offsets) -> bool:
        return False  # the positions not read yet since the write

    async def until(self, offsets, deadline: float) -> bool:
        if self._caught_up:
            await asyncio.sleep(self._query_s)
            return True
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        return False


@pytest.fixture
async def ends():
    made = LogEnds(KAFKA)  # as server.py builds it: timeout_s=2.0
    made._partitions = {TOPIC: 3}  # listed when the server started
    yield made
    made._consumer.released.set()  # the lookups still stalled return, so close need not wait for them
    await asyncio.to_thread(made.close)


def broker(ends: LogEnds, **kwargs) -> Broker:
    ends._consumer = faked = Broker(ends._consumer, **kwargs)
    return faked


async def timed(awaitable) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        await awaitable
    except (Unavailable, InvalidConsistencyToken) as exc:
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


def tokens(n: int) -> list[str]:
    """Tokens of `n` writes over the three partitions, past what the API has seen of the log's end."""
    return [f"{TOPIC}:{i % 3}:{100 + i}" for i in range(n)]


async def test_token_reads_while_the_broker_hangs_answer_within_the_consistency_wait(ends):
    broker(ends, hung=True)  # SIGSTOPped: each end lookup takes its whole 2 s timeout
    fresh = Freshness(Projector(), WAIT_S, ends)
    results = await asyncio.gather(*(timed(fresh.wait(t)) for t in tokens(8)))
    took = sorted(t for t, _ in results)
    assert [exc for _, exc in results] == [None] * 8  # projected: every read answers
    assert took[-1] <= WAIT_S, f"reads took {[round(t, 2) for t in took]} s; the wait is {WAIT_S} s"


async def test_token_reads_the_projector_has_not_reached_fail_within_the_consistency_wait_while_the_broker_hangs(
    ends,
):
    broker(ends, hung=True)
    fresh = Freshness(Projector(caught_up=False), WAIT_S, ends)
    results = await asyncio.gather(*(timed(fresh.wait(t)) for t in tokens(8)))
    assert all(isinstance(exc, Unavailable) for _, exc in results)  # the check skipped, as when refused
    took = max(t for t, _ in results)
    assert took <= WAIT_S + 0.3, f"the slowest read took {took:.1f} s; the wait is {WAIT_S} s"


async def test_concurrent_checks_of_one_partition_make_one_broker_request(ends):
    faked = broker(ends, answers=(1000,), delay_s=0.2)
    fresh = Freshness(Projector(), WAIT_S, ends)
    results = await asyncio.gather(*(timed(fresh.wait(f"{TOPIC}:0:{100 + i}")) for i in range(20)))
    assert [exc for _, exc in results] == [None] * 20
    assert faked.asked == 1


async def test_a_forged_token_is_still_refused_when_a_slow_broker_answers_within_the_wait(ends):
    broker(ends, answers=(10,), delay_s=0.3)
    fresh = Freshness(Projector(caught_up=False), WAIT_S, ends)
    elapsed, refused = await timed(fresh.wait(f"{TOPIC}:1:50"))
    assert isinstance(refused, InvalidConsistencyToken) and "beyond the log's end" in str(refused)
    assert elapsed < WAIT_S  # at the broker's answer, not at the end of the wait


async def test_a_token_is_not_refused_for_the_end_of_a_request_sent_before_its_write(ends):
    """A check joining a request already sent could get an end from before its token's write was acknowledged."""
    faked = broker(ends, answers=(5, 8), delay_s=0.3)
    earlier = asyncio.ensure_future(ends.check(_token(2), time.monotonic() + WAIT_S))
    await asyncio.to_thread(faked.began.wait, 1.0)  # its request sent; the write of offset 6 acknowledged now
    await ends.check(_token(6), time.monotonic() + WAIT_S)  # the stale end (5) refused nothing
    await earlier
    assert faked.asked == 2
    with pytest.raises(InvalidConsistencyToken, match="beyond the log's end"):
        await ends.check(_token(8), time.monotonic() + WAIT_S)  # the later answer (8) does


def _token(offset: int) -> ConsistencyToken:
    return ConsistencyToken.of([(TOPIC, 0, offset)])
