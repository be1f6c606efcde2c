"""Consistency tokens: the log positions a write reached, so a later read can wait for them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# a part is `topic:partition:offset`; topics may hold colons (the prefix is free text), so the last two
# fields anchor it. ASCII digits only and at most what Kafka can hold (int32 partitions, int64 offsets):
# int() would take "²" or 5,000 digits and fail later, or Postgres would ("bigint out of range")
_PART = re.compile(r"(?P<topic>[!-~]{1,249}):(?P<partition>[0-9]{1,9}):(?P<offset>-?[0-9]{1,18})", re.ASCII)
# a write's token names at most every partition of every topic; more parts than that are not a token
MAX_PARTS = 1024


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
        return ConsistencyToken.of([(t, p, o) for (t, p), o in (*self.offsets.items(), *other.offsets.items())])

    def encode(self) -> str:
        return ",".join(f"{t}:{p}:{o}" for (t, p), o in sorted(self.offsets.items()))

    @classmethod
    def decode(cls, text: str) -> ConsistencyToken:
        if not text:
            return cls({})
        if text.count(",") >= MAX_PARTS:
            raise InvalidConsistencyToken(
                f"consistency token has more than {MAX_PARTS} parts; pass back the token a write returned"
            )
        return cls.of(_position(part) for part in text.split(","))


def _position(part: str) -> tuple[str, int, int]:
    found = _PART.fullmatch(part)
    if found is None:
        shown = part if len(part) <= 60 else part[:60] + "…"  # the message must fit in a status header
        raise InvalidConsistencyToken(
            f"malformed consistency token part {shown!r}; pass back the token a write returned"
        )
    return found["topic"], int(found["partition"]), int(found["offset"])
