"""Which keyed append an outside reader (Subscribe, webhooks) is given: only the first under its key, as the
projector keeps it (projections/idempotency.py) and the processors do (services/bus/runner.py).

A client's retry of a keyed write whose API died after appending it, before it was projected, appends it
again: new request id, new event ids and, unless the client chose them, new message or observation ids.
Everything inside peerlog drops that copy, so a reader given it holds ids peerlog never had, and an
event_id check cannot tell it from a new write."""

from __future__ import annotations

import hashlib

from services.events import Event
from services.events.requests import KeyedRequest

# keys a stream remembers, its workspace's latest: 1.1 MB at most, whatever the keys' length (a test holds it
# to 2), so a process's 100 streams and its webhooks stay small. A retry's copy follows its first within the
# client's call (the client library's 10 s, its retries included) or an API's restart (about 30 s in the
# chaos runs): 10,000 keyed calls of one workspace between the two is over 300 a second for that long
MOST_KEYS = 10_000

# how far before where a stream began it reads back for first appends, once per partition: the same
# retry window, with room for an application that sends the call again after the client gave up; each
# resumed stream reads that much of every partition it meets a keyed event on
LOOK_BACK_S = 300


class FirstAppends:
    """The first append id under each of the latest MOST_KEYS (scope, key) met, the oldest forgotten first."""

    def __init__(self, most: int = MOST_KEYS) -> None:
        self.most = most
        self._first: dict[bytes, str] = {}  # a dict keeps insertion order: its first entry is the oldest

    def __len__(self) -> int:
        return len(self._first)

    def repeated(self, event: Event) -> bool:
        """Whether `event` is of a later append under a key whose first append was met; a first is met here."""
        request: KeyedRequest | None = getattr(event, "request", None)
        if request is None:
            return False
        name = _name(request)
        first = self._first.get(name)
        if first is None:
            self._remember(name, request.request_id)
            return False
        return first != request.request_id

    def _remember(self, name: bytes, request_id: str) -> None:
        if len(self._first) >= self.most:
            del self._first[next(iter(self._first))]
        self._first[name] = request_id


def _name(request: KeyedRequest) -> bytes:
    # a digest: a scope and a key may each be hundreds of characters. The scope is the events' partition
    # key, which starts with the workspace, so (scope, key) names what the projector's row does
    return hashlib.blake2b(f"{request.scope}\0{request.key}".encode(), digest_size=16).digest()
