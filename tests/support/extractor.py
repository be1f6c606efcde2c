"""Deterministic model behaviours for the test model server: a fact extractor and its failure modes."""

from __future__ import annotations

import html
import re
from typing import Any

from tests.support.model_server import Reply

TURN = re.compile(r'<turn id="([^"]*)" speaker="([^"]*)" date="[^"]*" target="(yes|no)"[^>]*>(.*?)</turn>', re.S)


def target_turns(request: dict[str, Any]) -> list[tuple[str, str]]:
    """(message_id, content) of every target turn in a deriver request, unescaped."""
    user = next(m["content"] for m in request["messages"] if m["role"] == "user")
    return [(html.unescape(i), html.unescape(body)) for i, _, target, body in TURN.findall(user) if target == "yes"]


def is_deriver(request: dict[str, Any]) -> bool:
    return any("<conversation>" in (m.get("content") or "") for m in request["messages"])


def extract_each_turn(request: dict[str, Any]) -> Reply:
    """One fact per target turn: the turn itself, cited with its full text as the span."""
    facts = [
        {"content": f"The target said: {text}", "message_id": mid, "span": text} for mid, text in target_turns(request)
    ]
    return Reply(content={"facts": facts})


def with_fact(content_of):
    """A reply handler giving, per target turn, the fact `content_of(text)` with the turn as its span."""

    def handler(request: dict[str, Any]) -> Reply:
        facts = [{"content": content_of(text), "message_id": mid, "span": text} for mid, text in target_turns(request)]
        return Reply(content={"facts": facts})

    return handler
