"""A webhook delivery against a local HTTP server that fails, times out, then recovers: retried until it
lands, every attempt the same body correctly signed; one that never recovers is dead-lettered after the
policy's attempts with the last error; one to a URL the client cannot send to, at once, saying why."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator

import httpx
import pytest

from services.webhooks.delivery import Endpoint, RetryPolicy, deliver
from services.webhooks.signing import SIGNATURE_HEADER, verify
from tests.support.webhook_receiver import Receiver

SECRET = b"whsec-test"
BODY = b'{"type":"MessageAppended","event_id":"e1"}'
FAST = RetryPolicy(attempts=4, first_wait_s=0.05, max_wait_s=0.2, timeout_s=0.5)


@pytest.fixture
def receiver(request) -> Iterator[Receiver]:
    with Receiver(request.param) as server:
        yield server


def endpoint(receiver: Receiver) -> Endpoint:
    return Endpoint("hook-1", "w", receiver.url, SECRET)


@pytest.mark.parametrize("receiver", [[500, "hang", 204]], indirect=True)
async def test_a_delivery_is_retried_through_a_failure_and_a_timeout_until_the_receiver_recovers(receiver):
    async with httpx.AsyncClient() as client:
        outcome = await deliver(client, endpoint(receiver), "e1", "MessageAppended", BODY, FAST)
    assert outcome.delivered and outcome.attempts == 3
    assert [body for _, body, _ in receiver.received] == [BODY] * 3
    for headers, body, _ in receiver.received:
        assert verify(SECRET, headers[SIGNATURE_HEADER], body, time.time())
        assert headers["Peerlog-Event-Id"] == "e1" and headers["Peerlog-Event-Type"] == "MessageAppended"
    assert not verify(b"another secret", receiver.received[0][0][SIGNATURE_HEADER], BODY, time.time())
    assert not verify(SECRET, receiver.received[0][0][SIGNATURE_HEADER], BODY, time.time() + 3600)  # a replay


@pytest.mark.parametrize("receiver", [[500, 503, 500, 500, 500]], indirect=True)
async def test_a_delivery_that_never_lands_is_dead_lettered_after_the_last_attempt(receiver):
    async with httpx.AsyncClient() as client:
        outcome = await deliver(client, endpoint(receiver), "e1", "MessageAppended", BODY, FAST)
    assert not outcome.delivered and outcome.attempts == 4 and outcome.error == "Refused: HTTP 500"
    assert len(receiver.received) == 4


@pytest.mark.parametrize("url", ["http://\u2603.example.com/hook", "http://[v1.fe]/", "http://xn--a.example.com/"])
async def test_a_url_the_client_cannot_send_to_is_dead_lettered_at_once_with_why(url):
    # before, the error was raised: the endpoint's loop died on the event and restarted on it forever
    async with httpx.AsyncClient() as client:
        outcome = await deliver(client, Endpoint("hook-1", "w", url, SECRET), "e1", "MessageAppended", BODY, FAST)
    assert not outcome.delivered and outcome.attempts == 1
    assert outcome.error.startswith("undeliverable: ") and ("Invalid" in outcome.error), outcome.error


@pytest.mark.parametrize("receiver", [["huge"]], indirect=True)
async def test_a_receivers_answer_is_judged_by_its_status_and_its_body_never_read(receiver):
    # a 300 MB answer, read whole, took the webhook process (or the API's, on a retry) out of memory
    tracemalloc.start()
    try:
        async with httpx.AsyncClient() as client:
            outcome = await deliver(client, endpoint(receiver), "e1", "MessageAppended", BODY, FAST)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert outcome.delivered and outcome.attempts == 1
    assert peak < 20_000_000, f"{peak:,} bytes held"


@pytest.mark.parametrize("receiver", [["drip", 204]], indirect=True)
async def test_an_answer_dripped_a_byte_at_a_time_is_cut_off_at_the_attempt_timeout_and_retried(receiver):
    # httpx's timeout bounds each read: a byte every 0.1 s never passed 0.5 s, and the attempt took 4 s
    started = time.monotonic()
    async with httpx.AsyncClient() as client:
        outcome = await deliver(client, endpoint(receiver), "e1", "MessageAppended", BODY, FAST)
    assert outcome.delivered and outcome.attempts == 2
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("receiver", [["slow"]], indirect=True)
async def test_a_receiver_answering_within_the_policys_timeout_is_delivered_once_whatever_httpxs_default(receiver):
    # httpx's own 5 s read timeout cut the attempt first: the receiver did the work, was sent it again, and
    # a receiver that always takes 6 s had its events dead-lettered
    from services.webhooks.targets import delivery_client

    async with delivery_client(allow_private=True) as client:
        outcome = await deliver(client, endpoint(receiver), "e1", "MessageAppended", BODY, RetryPolicy(attempts=2))
    assert outcome.delivered and outcome.attempts == 1 and len(receiver.received) == 1
