"""A local HTTP server that receives webhook deliveries and answers each by the next step of a script."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HANG_S = 1.5  # longer than the tests' delivery timeout
SLOW_S = 5.5  # longer than httpx's own default timeout (5 s), shorter than the delivery policy's (10 s)


HUGE_BYTES = 300_000_000  # the body of a 'huge' answer
DRIP_S = 0.1  # between the bytes of a 'drip' answer's status line and headers


class Receiver(ThreadingHTTPServer):
    """Each POST takes the next step of `script`: a status code; 'hang' (answers 204 after HANG_S, too late);
    'slow' (answers 204 after SLOW_S);
    'huge' (200 with a body of HUGE_BYTES); 'drip' (a 200 whose status line and headers come a byte every
    DRIP_S). Past the script it answers 204. `received` holds (headers, body, status) of every POST."""

    def __init__(self, script=()) -> None:
        self.script, self.received = list(script), []
        super().__init__(("127.0.0.1", 0), _Handler)
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"

    def delivered(self) -> list[bytes]:
        """Bodies the receiver answered 2xx in time."""
        return [body for _, body, status in self.received if status == 204]

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        server: Receiver = self.server
        body = self.rfile.read(int(self.headers["Content-Length"]))
        step = server.script.pop(0) if server.script else 204
        server.received.append((dict(self.headers), body, "hung" if step == "hang" else step))
        if step in ("huge", "drip"):
            try:
                _HOSTILE[step](self)
            except OSError:  # the client went away: what these answers are for
                pass
            return
        if step in ("hang", "slow"):
            time.sleep(HANG_S if step == "hang" else SLOW_S)
            step = 204
        self.send_response(step)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def _huge(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", str(HUGE_BYTES))
    handler.end_headers()
    chunk = b"x" * 1_000_000
    for _ in range(HUGE_BYTES // len(chunk)):
        handler.wfile.write(chunk)


def _drip(handler: BaseHTTPRequestHandler) -> None:
    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()
        time.sleep(DRIP_S)


_HOSTILE = {"huge": _huge, "drip": _drip}


def private_targets_allowed(settings):
    """`settings` with webhooks allowed to reach private addresses: the Receiver listens on 127.0.0.1."""
    from services.webhooks.settings import WebhookSettings

    return settings.model_copy(update={"webhook": WebhookSettings(allow_private_targets=True)})
