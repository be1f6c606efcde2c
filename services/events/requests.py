"""What a keyed (idempotent) client write carries on each event it appends."""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ConfigDict


class KeyedRequest(BaseModel):
    """The client's idempotency key, a fingerprint of what it asked, and this append's own id.

    Every event of one keyed append carries the same value. The projector keeps the first append per
    (workspace, scope, key) and drops the events of any later one (projections/idempotency.py), so the
    log, not a process's memory, decides which write a key stands for.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    # the partition key of the events (`workspace/session`, `workspace/observer/observed`): a key is
    # scoped to it, so one partition orders every use of a key and a rebuild picks the same first one
    scope: str
    fingerprint: str  # sha256 of the request as the client sent it (server-filled values left out)
    request_id: str  # one per append: tells a retry's duplicate append from the first


def keyed_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 of a keyed-capable event had no `request`: it was never keyed."""
    return data


# keys a stream processor remembers per scope: a later append under a key comes from a retry that
# overtook a dead API's append, seconds after it, so only the scope's recent keys can see one
RECENT_KEYS = 256


def screen(recent: dict[str, str] | None, request: KeyedRequest) -> tuple[bool, dict[str, str] | None]:
    """Whether an event carrying `request` is of a later append under a used key, judged by `recent`
    (the first append id of each of the scope's latest keys, in the order first seen), and `recent`
    after it (None when unchanged). A stream processor's counterpart of the projector's screen
    (projections/idempotency.py): what the projections drop, no processor may act on."""
    recent = recent or {}
    name = hashlib.sha256(request.key.encode()).hexdigest()[:16]
    first = recent.get(name)
    if first is not None:
        return first != request.request_id, None
    kept = dict(list(recent.items())[-(RECENT_KEYS - 1) :])
    kept[name] = request.request_id
    return False, kept
