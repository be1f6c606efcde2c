"""Page tokens: a position in one list, signed so that a token works only for the list that issued it.

A token is `base64url(position).base64url(mac)`. The MAC (HMAC-SHA256, keyed by `PEERLOG_API_CURSOR_KEY`
or a random key per start) covers the position and the list's scope: its name and what selects its rows
(workspace, session, filters). The scope is not carried in the token, so a token presented to another
list, or to the same list over another workspace, fails the check, and so does any edited token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from datetime import datetime

from services.api.validation import ID_PATTERN
from services.errors import InvalidArgument

NOT_OURS = "page_token is not one this list issued; pass next_page_token back as-is"
MAX_TOKEN_CHARS = 4096  # far above any position we issue (an id is at most 512 characters)
_MAC_BYTES = 16
_SEQ = re.compile(r"[0-9]{1,18}", re.ASCII)  # fits Postgres' bigint; int() would take "²" and 5,000 digits


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


class PageCursors:
    """Issues and checks page tokens with one key."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def from_setting(cls, key: str) -> PageCursors:
        # no key set: a random one, so tokens are still unforgeable, only not valid across restarts
        return cls(key.encode() if key else secrets.token_bytes(32))

    def encode(self, scope: Sequence[str], position: str) -> str:
        raw = position.encode()
        return f"{_b64(raw)}.{_b64(self._mac(scope, raw))}"

    def decode(self, scope: Sequence[str], token: str) -> str:
        """The position in `token` ("" for no token); InvalidArgument unless this list issued it."""
        if not token:
            return ""
        body, dot, mac = token.partition(".")
        if not dot or len(token) > MAX_TOKEN_CHARS:
            raise InvalidArgument(NOT_OURS)
        try:
            raw, given = _unb64(body), _unb64(mac)
        except ValueError:  # binascii.Error, or (from a character outside ASCII) a plain ValueError
            raise InvalidArgument(NOT_OURS) from None
        if not hmac.compare_digest(given, self._mac(scope, raw)):
            raise InvalidArgument(NOT_OURS)
        try:
            return raw.decode()
        except UnicodeDecodeError:  # only a leaked key could sign this
            raise InvalidArgument(NOT_OURS) from None

    def decode_id(self, scope: Sequence[str], token: str) -> str:
        """A position that is an id (a workspace, peer or session), or "" for no token."""
        position = self.decode(scope, token)
        if position and not ID_PATTERN.fullmatch(position):  # only a leaked key could get here; no NUL in SQL
            raise InvalidArgument(NOT_OURS)
        return position

    def decode_seq(self, scope: Sequence[str], token: str) -> int | None:
        """A numeric position (a message's seq), or None for no token."""
        position = self.decode(scope, token)
        if not position:
            return None
        if not _SEQ.fullmatch(position):  # only a leaked key could get here; still no bad SQL
            raise InvalidArgument(NOT_OURS)
        return int(position)

    def decode_time_id(self, scope: Sequence[str], token: str) -> tuple[datetime, str] | None:
        """A position of a list ordered by time then id (`time_id` wrote it), or None for no token."""
        position = self.decode(scope, token)
        if not position:
            return None
        at, _, item_id = position.partition("|")
        try:
            when = datetime.fromisoformat(at)
        except ValueError:  # only a leaked key could get here
            raise InvalidArgument(NOT_OURS) from None
        if not ID_PATTERN.fullmatch(item_id):
            raise InvalidArgument(NOT_OURS)
        return when, item_id

    def _mac(self, scope: Sequence[str], raw: bytes) -> bytes:
        # each part length-prefixed, so no two scopes (or scope and position) can run together
        parts = [p.encode() for p in scope] + [raw]
        message = b"".join(len(p).to_bytes(4, "big") + p for p in parts)
        return hmac.new(self._key, message, hashlib.sha256).digest()[:_MAC_BYTES]


def time_id(at: datetime, item_id: str) -> str:
    """The position of an item in a list ordered by time then id, as `PageCursors.decode_time_id` reads it."""
    return f"{at.isoformat()}|{item_id}"
