"""Request checks that need no I/O. Each raises InvalidArgument with a message a person can act on."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson

from services.errors import InvalidArgument

ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,512}$")
MAX_CONTENT_CHARS = 25_000
MAX_MESSAGES_PER_CALL = 100
MAX_CLOCK_SKEW = timedelta(hours=1)
DEFAULT_PAGE, MAX_PAGE = 50, 1000
# serialized as JSON; more would be refused by the broker as an oversized record, after the request was accepted
MAX_METADATA_BYTES = 64 * 1024
# metadata is capped as JSON; protobuf's Struct spends up to 5.5 wire bytes per JSON byte (a list of
# one-digit numbers: 2 bytes each as JSON, 11 on the wire)
STRUCT_BYTES_PER_JSON_BYTE = 6
MAX_SEARCH_QUERY_CHARS = 10_000
# a list page stops adding items before its reply would pass this, so any page fits a client with gRPC's
# default 4 MiB receive limit (what is left covers the reply's framing); it ends with a page token as usual
MAX_PAGE_BYTES = 3_500_000
MAX_FILTER_IDS = 100  # ids in one filter list (sessions, authors), like GetContext's allowlist
SHOWN_IDS = 5  # ids an error message names before "and N more": it travels in a header capped at 16 KB
SHOWN_PROBLEMS = 3  # problems an error message names before "and N more" (each may quote the input)


# The largest request these limits allow, which the server must be able to receive (server.py): AddMessages
# with MAX_MESSAGES_PER_CALL messages of MAX_CONTENT_CHARS characters, up to 4 bytes each in UTF-8, each with
# MAX_METADATA_BYTES of metadata as a Struct; then per message its peer_id (≤ 512), created_at, and the
# tags and lengths, and per request its ids. About 50 MB, nearly all of it metadata at its worst encoding.
MESSAGE_FRAMING_BYTES = 4 * 1024
REQUEST_FRAMING_BYTES = 64 * 1024
MAX_REQUEST_BYTES = (
    MAX_MESSAGES_PER_CALL
    * (4 * MAX_CONTENT_CHARS + STRUCT_BYTES_PER_JSON_BYTE * MAX_METADATA_BYTES + MESSAGE_FRAMING_BYTES)
    + REQUEST_FRAMING_BYTES
)


def check_id(kind: str, value: str) -> str:
    if not ID_PATTERN.fullmatch(value or ""):
        shown = value if len(value or "") <= 40 else value[:40] + "…"
        raise InvalidArgument(
            f"{kind} {shown!r} is not a valid id: use 1–512 characters from A–Z, a–z, 0–9, '_' and '-'"
        )
    return value


def check_id_count(field: str, values: Sequence[str], limit: int = MAX_FILTER_IDS) -> None:
    if len(values) > limit:
        raise InvalidArgument(f"{field} lists {len(values)} ids; the limit is {limit}")


def listed(items: Sequence[str], shown: int = SHOWN_IDS, sep: str = ", ") -> str:
    """`items` (already formatted) for an error message: the first few, then how many more."""
    head = sep.join(items[:shown])
    return head if len(items) <= shown else f"{head} and {len(items) - shown} more"


def check_no_nul(field: str, text: str) -> None:
    # Postgres text and jsonb cannot hold U+0000: accepted here, the event would be quarantined by the projector
    if "\x00" in text:
        raise InvalidArgument(f"{field} contains a NUL character (U+0000), which cannot be stored; remove it")


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
            f"AddMessages takes at most {MAX_MESSAGES_PER_CALL} messages per call, got {n}; split the batch"
        )


def check_content(index: int, content: str) -> None:
    check_no_nul(f"messages[{index}].content", content)
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


MAX_OBSERVATIONS_PER_CALL = 100
MAX_OBSERVATION_CHARS = 2_000
MAX_SOURCES_PER_OBSERVATION = 20
MAX_REASON_CHARS = 2_000
MAX_QUERY_CHARS = MAX_CONTENT_CHARS  # so a whole message can serve as a query
DEFAULT_TOP_K, MAX_TOP_K = 10, 100
MAX_COSINE_DISTANCE = 2.0


def check_observation_count(n: int) -> None:
    if n == 0:
        raise InvalidArgument("CreateObservations needs at least one observation")
    if n > MAX_OBSERVATIONS_PER_CALL:
        raise InvalidArgument(
            f"CreateObservations takes at most {MAX_OBSERVATIONS_PER_CALL} observations per call, "
            f"got {n}; split the batch"
        )


def check_text(field: str, text: str, limit: int, *, required: bool = True) -> None:
    """InvalidArgument if `text` is blank (when required), longer than `limit` characters, or holds a NUL."""
    check_no_nul(field, text)
    if required and not text.strip():
        raise InvalidArgument(f"{field} is empty")
    if len(text) > limit:
        raise InvalidArgument(f"{field} has {len(text)} characters; the limit is {limit}: shorten it")


def check_source_count(index: int, n: int) -> None:
    if n > MAX_SOURCES_PER_OBSERVATION:
        raise InvalidArgument(
            f"observations[{index}] cites {n} sources; the limit is {MAX_SOURCES_PER_OBSERVATION}: "
            "keep the ones that support it best"
        )


def top_k(requested: int) -> int:
    if requested > MAX_TOP_K:
        raise InvalidArgument(f"top_k {requested} is over the limit of {MAX_TOP_K}")
    return requested or DEFAULT_TOP_K


def check_max_distance(value: float | None) -> float | None:
    if value is not None and not 0.0 <= value <= MAX_COSINE_DISTANCE:
        raise InvalidArgument(
            f"max_distance {value:g} is not a cosine distance: use a value from 0 (identical) "
            f"to {MAX_COSINE_DISTANCE:g}, or leave it unset for no limit"
        )
    return value


MAX_PEER_NAME_CHARS = 200


def check_peer_name(field: str, metadata: dict[str, Any]) -> None:
    """InvalidArgument unless a peer's metadata `name`, when given, is a display name: one line of 1 to
    MAX_PEER_NAME_CHARS characters with a letter or digit and no control character. Messages carry it,
    search reads it, and models are shown it."""
    name = metadata.get("name")
    if name is None:
        return
    if not isinstance(name, str) or not 0 < len(name) <= MAX_PEER_NAME_CHARS or not any(c.isalnum() for c in name):
        raise InvalidArgument(
            f'{field}.name is the peer\'s display name, how people call it ("Maria Lopez"): text of 1–'
            f"{MAX_PEER_NAME_CHARS} characters with a letter or digit, not {name!r:.60}"
        )
    _check_one_line(field, name)


# the characters str.splitlines breaks a line at, named so in the refusal; any other Cc is "a control character"
_LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")


def _check_one_line(field: str, name: str) -> None:
    """InvalidArgument at `name`'s first line break or control character: a peer names itself, and a name
    that broke a model's prompt into lines could pass itself off as an observation or an instruction."""
    for at, c in enumerate(name, 1):
        if c in _LINE_BREAKS or unicodedata.category(c) == "Cc":
            what = "a line break" if c in _LINE_BREAKS else "a control character"
            raise InvalidArgument(
                f"{field}.name has {what} (U+{ord(c):04X}) at character {at} of {name!r:.60}; a display name "
                "is one line of text with no control characters: remove it, or put a space where the name breaks"
            )


MAX_TIME_ZONE_CHARS = 64


def time_zone(field: str, name: str) -> tzinfo:
    """The zone an IANA name stands for; UTC when empty."""
    if not name:
        return UTC
    unknown = InvalidArgument(
        f"{field} {name[:100]!r} is not a time zone this server knows: give an IANA name such as "
        "'Europe/Lisbon' or 'America/New_York', or leave it empty for UTC"
    )
    if len(name) > MAX_TIME_ZONE_CHARS:  # the longest IANA name has 32; a longer one is no file name
        raise unknown
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # ValueError: a path-like or malformed key
        raise unknown from None


def check_metadata(field: str, value: dict[str, Any]) -> None:
    """InvalidArgument unless `value` can be stored as it is: no NUL in any key or string, only finite numbers,
    at most MAX_METADATA_BYTES as JSON."""
    for path, item in _metadata_items(field, value):
        if isinstance(item, str):
            check_no_nul(path, item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidArgument(f"{path} is {item}, which JSON cannot express")
    size = len(orjson.dumps(value))
    if size > MAX_METADATA_BYTES:
        raise InvalidArgument(
            f"{field} is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}: "
            "keep large payloads elsewhere and store a reference"
        )


def _metadata_items(field: str, value: Any) -> Iterator[tuple[str, Any]]:
    """(path, item) for every key (as a string item) and value at any depth, without recursion."""
    stack = [(field, value)]
    while stack:
        path, item = stack.pop()
        yield path, item
        if isinstance(item, dict):
            for key, child in item.items():
                yield f"{path} key {key[:40]!r}", key
                stack.append((f"{path}[{key[:40]!r}]", child))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", child) for i, child in enumerate(item))
