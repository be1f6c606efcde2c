"""Request checks that need no I/O. Each raises InvalidArgument with a message a person can act on."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from services.errors import InvalidArgument

ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,512}$")
MAX_CONTENT_CHARS = 25_000
MAX_MESSAGES_PER_CALL = 100
MAX_CLOCK_SKEW = timedelta(hours=1)
DEFAULT_PAGE, MAX_PAGE = 50, 1000


def check_id(kind: str, value: str) -> str:
    if not ID_PATTERN.fullmatch(value or ""):
        shown = value if len(value or "") <= 40 else value[:40] + "…"
        raise InvalidArgument(
            f"{kind} {shown!r} is not a valid id: use 1–512 characters from A–Z, a–z, 0–9, '_' and '-'"
        )
    return value


def check_distinct(kind: str, values: Sequence[str]) -> None:
    seen: set[str] = set()
    for v in values:
        if v in seen:
            raise InvalidArgument(f"{kind} {v!r} is listed twice in one request")
        seen.add(v)


def check_message_count(n: int) -> None:
    if n == 0:
        raise InvalidArgument("AddMessages needs at least one message")
    if n > MAX_MESSAGES_PER_CALL:
        raise InvalidArgument(
            f"AddMessages takes at most {MAX_MESSAGES_PER_CALL} messages per call, got {n}; "
            "split the batch"
        )


def check_content(index: int, content: str) -> None:
    if not content.strip():
        raise InvalidArgument(f"messages[{index}].content is empty")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidArgument(
            f"messages[{index}].content has {len(content)} characters; the limit is "
            f"{MAX_CONTENT_CHARS}: split it into several messages"
        )


def check_created_at(index: int, created_at: datetime, now: datetime | None = None) -> None:
    now = now or datetime.now(UTC)
    if created_at > now + MAX_CLOCK_SKEW:
        raise InvalidArgument(
            f"messages[{index}].created_at {created_at.isoformat()} is in the future; "
            "leave it unset to use the time of receipt"
        )


def page_size(requested: int) -> int:
    if requested > MAX_PAGE:
        raise InvalidArgument(f"page_size {requested} is over the limit of {MAX_PAGE}")
    return requested or DEFAULT_PAGE
