"""Consistency tokens: the log positions a write reached, so a later read can wait for them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


class InvalidConsistencyToken(ValueError):
    pass


@dataclass(frozen=True)
class ConsistencyToken:
    """Highest offset written per (topic, partition). Readers wait until the projections are past it."""

    offsets: Mapping[tuple[str, int], int]

    @classmethod
    def of(cls, positions: Iterable[tuple[str, int, int]]) -> ConsistencyToken:
        best: dict[tuple[str, int], int] = {}
        for topic, partition, offset in positions:
            best[(topic, partition)] = max(offset, best.get((topic, partition), -1))
        return cls(best)

    def merge(self, other: ConsistencyToken) -> ConsistencyToken:
        return ConsistencyToken.of(
            [(t, p, o) for (t, p), o in (*self.offsets.items(), *other.offsets.items())]
        )

    def encode(self) -> str:
        return ",".join(f"{t}:{p}:{o}" for (t, p), o in sorted(self.offsets.items()))

    @classmethod
    def decode(cls, text: str) -> ConsistencyToken:
        if not text:
            return cls({})
        positions = []
        for part in text.split(","):
            topic, sep, rest = part.rpartition(":")
            topic, sep2, partition = topic.rpartition(":")
            if not (sep and sep2 and topic and partition.isdigit() and rest.lstrip("-").isdigit()):
                raise InvalidConsistencyToken(
                    f"malformed consistency token part {part!r}; pass back the token a write returned"
                )
            positions.append((topic, int(partition), int(rest)))
        return cls.of(positions)
