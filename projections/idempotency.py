"""Keyed client writes, projected: the first append under a key wins, a later one is a no-op.

The API serialises the uses of one key and looks here before it appends (services/api/idempotency.py),
so the log normally holds one append per key. This is the guard for when it does not (an API that died
between its append and the lock's release, a write racing from an older API): the log's order within the
key's partition decides, so the live projection and any rebuild keep the same first append and drop the
events of every later one before a handler sees them. The winner's row holds the reply a repeat gets.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import Connection, RowMapping, select, tuple_
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from projections.schema import idempotent_requests
from services.bus.consistency import ConsistencyToken
from services.events import MessageAppended, ObservationAdded

log = logging.getLogger(__name__)

# the id each keyed event creates, which the reply lists
_CREATED_ID = {MessageAppended: "message_id", ObservationAdded: "observation_id"}

_t = idempotent_requests.c


def screen(conn: Connection, decoded: Sequence[tuple]) -> list[tuple]:
    """`decoded` ((record, event) in log order) without the events of a later append under a used key;
    records each first append's ids and positions (inside the caller's transaction)."""
    keyed = [(r, e) for r, e in decoded if getattr(e, "request", None) is not None]
    if not keyed:
        return list(decoded)
    names = sorted({(e.workspace_id, e.request.scope, e.request.key) for _, e in keyed})
    rows = {
        (w, s, k): dict(row)
        for w, s, k, row in (
            (r["workspace_id"], r["scope"], r["idempotency_key"], r)
            for r in conn.execute(
                select(idempotent_requests).where(tuple_(_t.workspace_id, _t.scope, _t.idempotency_key).in_(names))
            ).mappings()
        )
    }
    changed, dropped = {}, set()
    for record, event in keyed:
        req, name = event.request, (event.workspace_id, event.request.scope, event.request.key)
        row = rows.setdefault(
            name,
            dict(
                workspace_id=name[0],
                scope=name[1],
                idempotency_key=name[2],
                request_id=req.request_id,
                fingerprint=req.fingerprint,
                ids=[],
                token="",
                recorded_at=event.occurred_at,
            ),
        )
        if row["request_id"] != req.request_id:
            dropped.add(event.event_id)
            continue
        row["ids"] = [*row["ids"], getattr(event, _CREATED_ID[type(event)])]
        here = ConsistencyToken.of([(record.topic, record.partition, record.offset)])
        row["token"] = ConsistencyToken.decode(row["token"]).merge(here).encode()
        changed[name] = row
    if dropped:
        log.warning("dropped %d event(s) of a repeated append under a used idempotency key", len(dropped))
    if changed:
        stmt = insert(idempotent_requests)
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=[_t.workspace_id, _t.scope, _t.idempotency_key],
                set_={"ids": stmt.excluded.ids, "token": stmt.excluded.token},
            ),
            list(changed.values()),
        )
    return [(r, e) for r, e in decoded if e.event_id not in dropped]


async def first_request(conn: AsyncConnection, workspace_id: str, scope: str, key: str) -> RowMapping | None:
    """The projected first append under `key` in `scope`, or None."""
    return (
        (
            await conn.execute(
                select(idempotent_requests).where(
                    _t.workspace_id == workspace_id, _t.scope == scope, _t.idempotency_key == key
                )
            )
        )
        .mappings()
        .first()
    )
