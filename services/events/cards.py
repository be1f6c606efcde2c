"""Peer cards: a short list of stable facts about the observed peer, per pair."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from services.events.base import Event
from services.events.perception import PAIR_KEY

CARD_PREFIXES = ("IDENTITY:", "ATTRIBUTE:", "RELATIONSHIP:", "INSTRUCTION:")
MAX_ENTRIES = 40
MAX_ENTRY_CHARS = 200


class PeerCardUpdated(Event):
    """The pair's peer card now reads `entries` (the whole card, not a diff). A dream's names the card it
    `replaces` (as the dream read it): applied only if the card still reads so where the event stands in the
    log, so a client's card set while the dream ran is not overwritten by one made from the older card.
    None (a client's): applied whatever the card was."""

    key_fields: ClassVar[tuple[str, ...]] = PAIR_KEY
    schema_version_current: ClassVar[int] = 2  # 2: `replaces`
    upcasters = {1: lambda data: data}  # version 1 replaced whatever the card was, as None does

    observer_id: str
    observed_id: str
    entries: tuple[str, ...]
    replaces: tuple[str, ...] | None = None


# what str.splitlines breaks at: an entry holding one would show as several lines, each read as an entry
LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def card_problems(entries: Sequence[str]) -> list[str]:
    """Why `entries` is not a valid card (empty list: it is)."""
    if len(entries) > MAX_ENTRIES:  # the only problem worth naming: checking each entry would list thousands
        return [f"a card holds at most {MAX_ENTRIES} entries, got {len(entries)}"]
    problems = []
    for i, entry in enumerate(entries):
        if not entry.startswith(CARD_PREFIXES):
            problems.append(f"entries[{i}] {entry[:40]!r} must start with one of {', '.join(CARD_PREFIXES)}")
        elif not entry.split(":", 1)[1].strip():
            problems.append(f"entries[{i}] has nothing after its prefix")
        if "\x00" in entry:  # Postgres text cannot hold it: the card would be quarantined, not shown
            problems.append(f"entries[{i}] contains a NUL character (U+0000)")
        if any(c in LINE_BREAKS for c in entry):  # a card is shown one entry a line: a break forges more entries
            problems.append(f"entries[{i}] holds a line break; one entry is one line")
        if len(entry) > MAX_ENTRY_CHARS:
            problems.append(f"entries[{i}] has {len(entry)} characters; the limit is {MAX_ENTRY_CHARS}")
    return problems
