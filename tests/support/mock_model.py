"""A model server inside the test process (httpx's MockTransport), for replies a real server would not
send: any status, content type and raw body, answered to both the chat and the embeddings routes.

    def test_x(mock_model):  # the fixture patches the model clients' HTTP clients
        mock_model.answer = (200, "text/html", b"<html/>")
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx2
import openai
import pytest

from services.llm import client as client_module
from services.llm import embeddings as embeddings_module

BASE_URL = "http://model.test/v1"
Answer = tuple[int, str, bytes]  # status, content type, body


class MockModel:
    """Answers every request with `answer`, or `answer(request_json)`; keeps the requests."""

    def __init__(self) -> None:
        self.answer: Answer | Callable[[dict], Answer] = (500, "text/plain", b"unset")
        self.requests: list[dict] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        status, content_type, payload = self.answer(body) if callable(self.answer) else self.answer
        return httpx2.Response(status, headers={"content-type": content_type}, content=payload)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Route every ModelClient and OpenAIEmbedder made from now on to this server."""
        transport = httpx2.MockTransport(self)
        for module in (client_module, embeddings_module):
            monkeypatch.setattr(
                module, "async_http_client", lambda: openai.DefaultAsyncHttpxClient(transport=transport)
            )
        monkeypatch.setattr(
            embeddings_module, "sync_http_client", lambda: openai.DefaultHttpxClient(transport=transport)
        )


def completion(message: object = None, **fields: object) -> Answer:
    """A chat completion whose first choice holds `message` (default: the text "ok"); `fields` override."""
    message = {"role": "assistant", "content": "ok"} if message is None else message
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", **fields}
    body.setdefault("choices", [{"index": 0, "message": message, "finish_reason": "stop"}])
    return 200, "application/json", json.dumps(body).encode()


def text(content: str) -> Answer:
    """A chat completion whose text is `content`."""
    return completion({"role": "assistant", "content": content})


def vectors(*rows: object) -> Answer:
    """An embeddings reply holding `rows` as the vectors, in order."""
    data = [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)]
    return 200, "application/json", json.dumps({"object": "list", "model": "e", "data": data}).encode()
