"""A deterministic OpenAI-compatible HTTP server for tests; the real `openai` client talks to it.

    with ModelServer() as server:
        server.script([Reply(content={"facts": []}), Reply(status=500)])
        client = ModelClient("deriver", ModelStageSettings(base_url=server.base_url))
        ...
        assert server.requests[0]["response_format"]["type"] == "json_schema"

Routes: POST /v1/chat/completions (JSON, or SSE when `stream: true`), POST /v1/embeddings
(hashed bag-of-words vectors), GET /v1/models. Usage numbers are word counts, so tests can predict them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_MODEL = "test-model"


@dataclass(frozen=True)
class Reply:
    """What the server answers to one chat completion request.

    content: None, text, or a dict (sent JSON-encoded); tool_calls: OpenAI-shaped tool calls;
    status != 200 sends an error (error_body, or a standard error object); delay_s waits first;
    model: the name reported (default: the model asked for); headers: extra response headers;
    chunks: the choices of each chunk a streamed reply sends, as given (a hostile or broken server's);
    finish_reason: as the server reports it (default: "tool_calls" with calls, else "stop"; "length": cut).
    """

    content: str | dict[str, Any] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    status: int = 200
    delay_s: float = 0.0
    error_body: dict[str, Any] | str | None = None
    model: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[list[Any]] | None = None
    finish_reason: str | None = None

    def finish(self) -> str:
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")

    def text(self) -> str | None:
        """The content as the message text."""
        return json.dumps(self.content) if isinstance(self.content, dict) else self.content


@dataclass(frozen=True)
class Received:
    """One request the server got (header names in lower case)."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None


def word_count(text: str | None) -> int:
    """The deterministic "token" count used in usage numbers."""
    return len(text.split()) if text else 0


def prompt_words(request: dict[str, Any]) -> int:
    """Words in every message of a chat request (text parts of multi-part content included)."""
    total = 0
    for message in request.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
        total += word_count(content)
    return total


def completion_words(reply: Reply) -> int:
    """Words in a reply's text and tool-call arguments."""
    arguments = " ".join(call.get("function", {}).get("arguments", "") for call in reply.tool_calls or [])
    return word_count(reply.text()) + word_count(arguments)


def echo_last_user(request: dict[str, Any]) -> Reply:
    """The default reply: the last user message's text."""
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    return Reply(content=content if isinstance(content, str) else json.dumps(content))


def hashed_embedding(text: str, dimensions: int) -> list[float]:
    """A unit vector from hashed words: equal texts give equal vectors, shared words raise cosine."""
    vector = [0.0] * dimensions
    for word in text.lower().split():
        digest = hashlib.sha256(word.encode()).digest()
        vector[int.from_bytes(digest[:4], "big") % dimensions] += 1.0 if digest[4] % 2 else -1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def completion_body(request: dict[str, Any], reply: Reply, created: int) -> dict[str, Any]:
    """A non-streaming chat.completion object."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text()}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    prompt, completion = prompt_words(request), completion_words(reply)
    return {
        "id": f"chatcmpl-{created}",
        "object": "chat.completion",
        "created": created,
        "model": reply.model or request.get("model", DEFAULT_MODEL),
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish()}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def stream_chunks(request: dict[str, Any], reply: Reply, created: int) -> Iterator[dict[str, Any]]:
    """chat.completion.chunk objects: the role, the text word by word, tool calls, then the finish."""
    base = {
        "id": f"chatcmpl-{created}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": reply.model or request.get("model", DEFAULT_MODEL),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    if reply.chunks is not None:
        yield from ({**base, "choices": choices} for choices in reply.chunks)
        return
    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(reply.text() or ""):
        yield chunk({"content": piece})
    for index, call in enumerate(reply.tool_calls or []):
        yield chunk({"tool_calls": [{"index": index, **call}]})
    yield chunk({}, reply.finish())
    if request.get("stream_options", {}).get("include_usage"):
        prompt, completion = prompt_words(request), completion_words(reply)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        yield {**base, "choices": [], "usage": usage}


def _pieces(text: str) -> list[str]:
    """The text cut after each space, so the pieces join back to it exactly."""
    pieces, start = [], 0
    for index, char in enumerate(text):
        if char == " ":
            pieces.append(text[start : index + 1])
            start = index + 1
    return [*pieces, text[start:]] if start < len(text) else pieces


def error_body(reply: Reply) -> bytes:
    """The error response body: the given one, or a standard OpenAI error object."""
    if isinstance(reply.error_body, str):
        return reply.error_body.encode()
    body = reply.error_body or {
        "error": {"message": f"test server error {reply.status}", "type": "test_error", "code": reply.status}
    }
    return json.dumps(body).encode()


def _lower(headers: Any) -> dict[str, str]:
    """Header names in lower case (HTTP names are case-insensitive; clients differ)."""
    return {name.lower(): value for name, value in headers.items()}


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        pass  # quiet: pytest shows failures, not access logs

    def do_GET(self) -> None:
        self.server.owner._record(Received("GET", self.path, _lower(self.headers), None))
        if self.path.rstrip("/") == "/v1/models":
            models = [{"id": DEFAULT_MODEL, "object": "model", "created": 0, "owned_by": "peerlog-tests"}]
            self._send_json(200, {"object": "list", "data": models})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.owner._record(Received("POST", self.path, _lower(self.headers), body))
        route = self.path.rstrip("/")
        if route == "/v1/chat/completions":
            self._chat(body)
        elif route == "/v1/embeddings":
            self._embeddings(body)
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def _chat(self, request: dict[str, Any]) -> None:
        reply = self.server.owner._next_reply(request)
        if reply.delay_s and self.server.owner._stopping.wait(reply.delay_s):
            return  # the server is closing: give up on this (probably abandoned) request
        created = int(time.time())
        if reply.status != 200:
            self._send(reply.status, error_body(reply), "application/json", reply.headers)
        elif request.get("stream"):
            self._stream(stream_chunks(request, reply, created), reply.headers)
        else:
            self._send_json(200, completion_body(request, reply, created), reply.headers)

    def _embeddings(self, request: dict[str, Any]) -> None:
        failing = self.server.owner._embeddings_status
        if failing is not None:
            self._send(failing, error_body(Reply(status=failing)), "application/json", {})
            return
        texts = request.get("input", [])
        texts = [texts] if isinstance(texts, str) else texts
        dimensions = request.get("dimensions") or self.server.owner.embedding_dimensions
        data = [
            {"object": "embedding", "index": i, "embedding": hashed_embedding(str(text), dimensions)}
            for i, text in enumerate(texts)
        ]
        words = sum(word_count(str(text)) for text in texts)
        usage = {"prompt_tokens": words, "total_tokens": words}
        model = request.get("model", DEFAULT_MODEL)
        self._send_json(200, {"object": "list", "data": data, "model": model, "usage": usage})

    def _stream(self, chunks: Iterable[dict[str, Any]], headers: dict[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # the end of the stream is the end of the body
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.close_connection = True
        try:
            for chunk in chunks:
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away: nothing to tell it

    def _send_json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(body).encode(), "application/json", headers or {})

    def _send(self, status: int, payload: bytes, content_type: str, headers: dict[str, str]) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and hung up: expected in timeout tests


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a handler still sleeping on delay_s must not hold up close()
    owner: ModelServer


class ModelServer:
    """The test server. Use as a context manager; `base_url` is "http://127.0.0.1:PORT/v1"."""

    def __init__(self, embedding_dimensions: int = 384) -> None:
        self.embedding_dimensions = embedding_dimensions
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._calls: list[Received] = []
        self._script: deque[Reply] = deque()
        self._scripted = False
        self._handler: Callable[[dict[str, Any]], Reply] | None = None
        self._embeddings_status: int | None = None
        self._http: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """Where the OpenAI client should point."""
        if self._http is None:
            raise RuntimeError("the model server is not running")
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def start(self) -> ModelServer:
        """Listen on a free port in a background thread."""
        self._http = _HttpServer(("127.0.0.1", 0), _Handler)
        self._http.owner = self
        # a short poll interval: shutdown() waits for it, once per test
        serve = functools.partial(self._http.serve_forever, poll_interval=0.02)
        self._thread = threading.Thread(target=serve, name="model-server", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port."""
        self._stopping.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def reply_with(self, handler: Callable[[dict[str, Any]], Reply]) -> None:
        """Answer chat requests with `handler(request_json)` once any scripted replies are used up."""
        with self._lock:
            self._handler = handler

    def fail_embeddings(self, status: int | None) -> None:
        """Answer embedding requests with HTTP `status` (an outage) until called with None."""
        with self._lock:
            self._embeddings_status = status

    def script(self, replies: Iterable[Reply]) -> None:
        """Answer the next chat requests with these replies, in order; a request past the end gets HTTP 400."""
        with self._lock:
            self._script.extend(replies)
            self._scripted = True

    def reset(self) -> None:
        """Forget the script, the handler and the recorded requests."""
        with self._lock:
            self._script.clear()
            self._scripted = False
            self._handler = None
            self._calls.clear()

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The parsed JSON body of every POST received, oldest first."""
        with self._lock:
            return [call.body for call in self._calls if call.body is not None]

    @property
    def calls(self) -> list[Received]:
        """Every request received (method, path, headers, body), oldest first."""
        with self._lock:
            return list(self._calls)

    def chat_requests(self) -> list[dict[str, Any]]:
        """The bodies of the chat completion requests only."""
        return [c.body for c in self.calls if c.body is not None and c.path.rstrip("/") == "/v1/chat/completions"]

    def _record(self, call: Received) -> None:
        with self._lock:
            self._calls.append(call)

    def _next_reply(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            if self._script:
                return self._script.popleft()
            handler, scripted = self._handler, self._scripted
        if handler is not None:
            return handler(request)
        if scripted:  # 400, not 5xx: a client must not retry a test's own mistake
            return Reply(status=400, error_body={"error": {"message": "test server: script exhausted"}})
        return echo_last_user(request)
