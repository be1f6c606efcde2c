"""The per-workspace lexicon behind BM25 (schema.message_lexicon): a batch's new messages are noted as
they are inserted and counted once, when the batch ends."""

from __future__ import annotations

from sqlalchemy import Connection, func, literal, select
from sqlalchemy.dialects.postgresql import insert

from projections.keys import among
from projections.schema import message_lexicon, messages

# Connection.info key: the messages a batch inserted, whose lexemes are counted when it ends. A workspace's
# lexicon rows are shared by every projector process whose partitions hold its sessions: each transaction
# takes their row locks once, in one order (workspace, lexeme), so two projectors wait for each other
# instead of deadlocking, as they could when each run of messages in a batch locked its own lexemes in
# whatever order the query yielded
_LEXICON_KEYS = "peerlog.lexicon_keys"


def to_count(conn: Connection, keys: list[tuple[str, str]]) -> None:
    """Note messages inserted just now, to be counted when the batch ends (count_lexemes)."""
    conn.info.setdefault(_LEXICON_KEYS, []).extend(keys)


def count_lexemes(conn: Connection) -> None:
    """Add the messages the batch inserted to their workspace's lexicon (see _LEXICON_KEYS)."""
    keys = conn.info.pop(_LEXICON_KEYS, [])
    if keys:
        _count_lexemes(conn, keys)


def forget_lexemes(conn: Connection) -> None:
    """Drop the keys of messages whose inserts were rolled back."""
    conn.info.pop(_LEXICON_KEYS, None)


def _count_lexemes(conn: Connection, keys: list[tuple[str, str]]) -> None:
    """Add the new messages to their workspace's lexicon: one more document for each lexeme they hold,
    and to the totals row (lexeme ''); `keys` are messages inserted just now, so none counts twice. The
    rows are written, and locked, in (workspace, lexeme) order."""
    m, lx = messages.c, message_lexicon.c
    fresh = select(m.workspace_id, m.content_tsv).where(among((m.workspace_id, m.message_id), keys)).subquery()
    each = select(
        fresh.c.workspace_id,
        func.unnest(func.tsvector_to_array(fresh.c.content_tsv)).label("lexeme"),
    ).subquery()
    per_lexeme = (
        select(each.c.workspace_id, each.c.lexeme, func.count(), literal(0))
        .group_by(each.c.workspace_id, each.c.lexeme)
        .order_by(each.c.workspace_id, each.c.lexeme)
    )
    totals = (
        select(fresh.c.workspace_id, literal(""), func.count(), func.sum(func.length(fresh.c.content_tsv)))
        .group_by(fresh.c.workspace_id)
        .order_by(fresh.c.workspace_id)
    )
    for rows in (per_lexeme, totals):
        stmt = insert(message_lexicon).from_select(["workspace_id", "lexeme", "docs", "lexemes"], rows)
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=[lx.workspace_id, lx.lexeme],
                set_={"docs": lx.docs + stmt.excluded.docs, "lexemes": lx.lexemes + stmt.excluded.lexemes},
            )
        )
