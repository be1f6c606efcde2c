"""A webhook delivery against a local HTTP server that fails, times out, then recovers: retried until it
lands, every attempt the same body correctly signed; one that never recovers is dead-lettered after the
policy's attempts with the last error."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from services.webhooks.delivery import Endpoint, RetryPolicy, deliver
from services.webhooks.signing import SIGNATURE_HEADER, verify

SECRET = b"whsec-test"
BODY = b'{"type":"MessageAppended","event_id":"e1"}'
FAST = RetryPolicy(attempts=4, first_wait_s=0.05, max_wait_s=0.2, timeout_s=0.5)


class Receiver(ThreadingHTTPServer):
    """Answers each POST by the next behaviour of a script: a status code, or 'hang' (longer than the timeout)."""

    def __init__(self, script: list) -> None:
        self.script, self.received = list(script), []
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        server: Receiver = self.server
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server.received.append((dict(self.headers), body))
        step = server.script.pop(0) if server.script else 204
        if step == "hang":
            time.sleep(1.5)
            step = 204  # too late: the sender has given up on this attempt
        self.send_response(step)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def receiver(request) -> Iterator[Receiver]:
    server = Receiver(request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def endpoint(receiver: Receiver) -> Endpoint:
    return Endpoint("hook-1", "w", receiver.url, SECRET)


@pytest.mark.parametrize("receiver", [[500, "hang", 204]], indirect=True)
async def test_a_delivery_is_retried_through_a_failure_and_a_timeout_until_the_receiver_recovers(receiver):
    async with httpx.AsyncClient() as client:
        outcome = await deliver(client, endpoint(receiver), "e1", "MessageAppended", BODY, FAST)
    assert outcome.delivered and outcome.attempts == 3
    assert [body for _, body in receiver.received] == [BODY] * 3
    for headers, body in receiver.received:
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
