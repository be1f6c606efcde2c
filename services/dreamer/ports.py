"""What the dreamer reads from the projections, as a narrow port (projections/tool_reads.py implements it;
the worker wires it in): the memory tools' reads, and the pair's store as a dream sees it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from services.toolloop.memory import MemoryReads, RecallScope, Row


class DreamReads(MemoryReads, Protocol):
    # the errors by which these reads say the store is out of reach (not a bad query): a dream that meets
    # one is done again from the committed offsets, where it ended the worker
    unavailable: tuple[type[Exception], ...]

    async def current_derivation(self, workspace_id: str, observer_id: str, observed_id: str) -> str:
        """The pair's current derivation, which a dream's edits go to."""

    async def newest_observations(self, scope: RecallScope, levels: Sequence[str], limit: int) -> Sequence[Row]:
        """The pair's newest live observations of `levels` (all when empty), newest first."""

    async def opening(self, scope: RecallScope, limit: int) -> tuple[Sequence[Row], Sequence[str]]:
        """The pair's `limit` newest live observations, newest first, and its peer card's entries."""

    async def named_observations(
        self, scope: RecallScope, derivation: str, ids: Sequence[str], content: str = ""
    ) -> dict[str, Row]:
        """The workspace's observations among `ids`, and with `content` the pair's live and deleted ones in
        `derivation` that say it (normalised), by id; each row with its `premise_ids`."""
