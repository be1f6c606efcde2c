"""The documented request limits, the server's receive limit and a default client's 4 MiB agree."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from types import MappingProxyType

from peerlog.v1 import messages_pb2
from services.api import convert as c
from services.api import validation as v
from services.api.reads import fitting, reply_bytes

DEFAULT_CLIENT_RECEIVE = 4 * 1024 * 1024
ID = "x" * 512
NOW = datetime(2026, 12, 1, tzinfo=UTC)


@cache
def densest_metadata() -> dict:
    """MAX_METADATA_BYTES of JSON at its most expensive as a Struct: one-digit numbers in a list."""
    n = (v.MAX_METADATA_BYTES - len('{"a":[]}') + 1) // 2
    value = {"a": [0] * n}
    v.check_metadata("metadata", value)  # within the limit
    return value


def test_the_server_receives_the_largest_add_messages_the_documented_limits_allow():
    metadata = c.struct(densest_metadata())
    new = messages_pb2.NewMessage(
        peer_id=ID, content="𝄞" * v.MAX_CONTENT_CHARS, metadata=metadata, created_at=c.ts(NOW)
    )
    request = messages_pb2.AddMessagesRequest(workspace_id=ID, session_id=ID, messages=[new] * v.MAX_MESSAGES_PER_CALL)
    assert 40_000_000 < request.ByteSize() <= v.MAX_REQUEST_BYTES


def message_row(content: str, metadata: dict, seq: int = 1) -> MappingProxyType:
    return MappingProxyType(
        dict(
            workspace_id=ID,
            session_id=ID,
            message_id=ID,
            peer_id=ID,
            content=content,
            created_at=NOW,
            metadata=metadata,
            seq=seq,
        )
    )


def test_a_row_takes_no_more_bytes_in_a_reply_than_its_bound():
    for row in (
        message_row("𝄞" * v.MAX_CONTENT_CHARS, densest_metadata()),
        message_row("hi", {}),
        message_row("€" * 100, {"k": {"n": [1.5, None, True, "s"]}}),
    ):
        assert c.message(row).ByteSize() <= reply_bytes(row)


def test_a_page_stops_before_its_reply_passes_the_budget_and_keeps_at_least_one_item():
    big = "𝄞" * v.MAX_CONTENT_CHARS
    rows = [message_row(big, densest_metadata(), seq) for seq in range(1, 1001)]
    kept = fitting(rows)
    reply = messages_pb2.ListMessagesResponse(messages=[c.message(r) for r in kept], next_page_token="t" * 200)
    assert 1 < len(kept) < len(rows) and reply.ByteSize() <= v.MAX_PAGE_BYTES < DEFAULT_CLIENT_RECEIVE
    assert fitting(rows, budget=1) == rows[:1]  # an item alone is never held back
    assert fitting(rows[:3]) == rows[:3]
