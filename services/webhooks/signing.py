"""The signature on a webhook delivery: HMAC-SHA256 over the timestamp and the body.

Header `Peerlog-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>`. A receiver
recomputes it over the raw body and refuses a timestamp older than its tolerance (replays)."""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "Peerlog-Signature"
TOLERANCE_S = 300
MOST_DIGITS = 12  # of a unix time in seconds until the year 33658: a longer one is no time (and overflows)


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The header value for `body` sent at `timestamp` (unix seconds)."""
    mac = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: bytes, header: str, body: bytes, now: float, tolerance_s: float = TOLERANCE_S) -> bool:
    """Whether `header` signs `body` with `secret`, at a time within `tolerance_s` of `now`."""
    # whatever a forger sends answers False, never raises: a receiver's handler would answer 500 instead
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        if len(parts["t"]) > MOST_DIGITS:
            return False
        timestamp = int(parts["t"])
        if abs(now - timestamp) > tolerance_s:
            return False
    except (KeyError, ValueError):
        return False
    expected = signature(secret, timestamp, body).encode()
    return hmac.compare_digest(expected, f"t={timestamp},v1={parts.get('v1', '')}".encode(errors="replace"))
