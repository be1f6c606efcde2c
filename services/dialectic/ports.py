"""What Chat reads from the projections, as a narrow port (projections/tool_reads.py implements it; the API
wires it in): the memory tools' reads, and the evidence prefetched before the first model call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from services.toolloop.memory import MemoryReads, RecallScope, Row


@dataclass(frozen=True)
class Evidence:
    """What memory holds about a question before any tool is used."""

    explicit: Sequence[Row]  # explicit observations nearest the question
    derived: Sequence[Row]  # derived ones, likewise
    history: Sequence[Row]  # the session's newest messages the observer saw, newest first
    found: bool  # anything at all about the pair: when not, Chat may abstain without a model call
    names: Mapping[str, str] = field(default_factory=dict)  # observer's and target's display names, by id


class ChatReads(MemoryReads, Protocol):
    async def evidence(self, scope: RecallScope, vector: Sequence[float], per_kind: int, history: int) -> Evidence:
        """The `per_kind` explicit and derived observations of the scope nearest `vector`, the session's newest
        `history` messages (none without a session), and whether the pair has any evidence at all."""
