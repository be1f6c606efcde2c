"""Pure splitting of a window whose facts do not fit one reply: into halves by message, a long message by
paragraph, then sentence, then word; and which messages a split derivation finished.

A fact repeats its message id and span, so a fact-dense turn needs several times its own size in reply: a
3,300-character biography asked ~5,900 reply tokens of a 1,024-token max_tokens, and was parked whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from services.deriver.batching import PendingMessage

# most pieces one window becomes (each one model call, two with a repair): a hostile message cannot multiply
# the calls without end. Halved evenly, a window splits three times, into pieces of an eighth of it
MAX_PIECES = 8
# a message piece no shorter than this is split no further: a sentence or two, whose facts fit any sane
# max_tokens; one that still does not fit is parked
MIN_PIECE_CHARS = 200
# where a long message may be cut, best first: a paragraph keeps a thought whole, a sentence its spans
_BOUNDARIES = (
    re.compile(r"\n\s*\n"),
    re.compile(r"\n"),
    re.compile(r"(?<=[.!?;:\u3002\uff01\uff1f])\s+"),
    re.compile(r"\s+"),
)

Window = tuple[PendingMessage, ...]


def halves(window: Sequence[PendingMessage]) -> tuple[Window, Window] | None:
    """Two windows that hold between them what `window` holds, or None when it is one message too short to cut.
    A piece of a message keeps the message's id: its text is a part of the message's, so the spans the model
    copies from it are found in the message."""
    if len(window) > 1:
        middle = len(window) // 2
        return tuple(window[:middle]), tuple(window[middle:])
    item = window[0]
    at = cut_point(item.content)
    if at is None:
        return None
    return (_piece(item, item.content[:at]),), (_piece(item, item.content[at:]),)


def cut_point(text: str) -> int | None:
    """Where to cut `text` in two (the boundary of the best kind nearest its middle that leaves both parts at
    least MIN_PIECE_CHARS long), or None if no boundary does."""
    middle = len(text) / 2
    for boundary in _BOUNDARIES:
        cuts = [m.start() for m in boundary.finditer(text, MIN_PIECE_CHARS, len(text) - MIN_PIECE_CHARS)]
        if cuts:
            return min(cuts, key=lambda at: abs(at - middle))
    return None


def _piece(item: PendingMessage, text: str) -> PendingMessage:
    part = text.strip()
    # tokens pro rata: only batching reads them, and a piece is never batched again
    return item.model_copy(update={"content": part, "tokens": item.tokens * len(part) // max(1, len(item.content))})


def parked(window: Sequence[PendingMessage], unfit: Iterable[Sequence[PendingMessage]]) -> tuple[Window, Window]:
    """(derived, parked): `window`'s messages with every piece derived, and those with a piece that never fit.
    A message is derived or parked whole: a retry derives whole messages, and would count the facts of its
    pieces that fit a second time."""
    out = {p.message_id for piece in unfit for p in piece}
    return tuple(p for p in window if p.message_id not in out), tuple(p for p in window if p.message_id in out)
