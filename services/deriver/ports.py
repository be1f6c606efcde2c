"""What the deriver needs from the projections, declared here and implemented there (projections/deriver_reads.py).

The processor sits below the projection code, so it names no table and runs no SQL: the worker and the
offline runs hand it an implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from services.deriver.judge import KnownObservation
from services.events.pairs import Pair


class StoreUnavailable(Exception):
    """The projections could not be read, even after the retries."""

    def __init__(self, attempts: int, last_error: BaseException) -> None:
        super().__init__(f"observation store unavailable after {attempts} attempt(s): {last_error}")
        self.attempts = attempts


class DuplicateCandidates(Protocol):
    """Existing observations that a new fact may duplicate. Read after the model call, never across it."""

    async def candidates(
        self, pair: Pair, keys: Sequence[str], embeddings: Sequence[Sequence[float]], sessions: Sequence[str]
    ) -> list[KnownObservation]:
        """Live explicit observations of the pair's derivation with one of `keys` (normalised contents), or
        nearest to one of `embeddings` among those a fact from `sessions[i]` may match (that session's, and
        clients' written for no session); raises StoreUnavailable when the projections cannot be read."""
        ...

    async def retired(self, pair: Pair, observation_ids: Sequence[str]) -> set[str]:
        """Those of `observation_ids` the projections hold as superseded or deleted (one not projected yet
        is not among them); raises StoreUnavailable when the projections cannot be read."""
        ...
