"""Places of something scarce that one process hands out, counted by who holds them: a workspace, a reader.

Subscribe streams, uploads and Chat calls each hold a process's resources for seconds to hours (a Kafka
consumer and a thread, a file of up to 32 MiB, model calls). Unbounded, one caller took them all and
every other tenant waited or timed out behind it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from services.errors import ResourceExhausted


@dataclass
class Slots:
    """At most `most` places held at once for each key; `refusal(key, held)` says why one more is refused
    and what to do about it."""

    most: int
    refusal: Callable[[str, int], str]
    held: Counter[str] = field(default_factory=Counter)

    def check(self, key: str) -> None:
        if self.held[key] >= self.most:
            raise ResourceExhausted(self.refusal(key, self.held[key]))

    def total(self) -> int:
        return self.held.total()


def per_workspace(most: int, what: str, setting: str, advice: str) -> Slots:
    """At most `most` places for each workspace, refused as "workspace W already has N `what` on this API
    process (`setting`): `advice`"."""
    return Slots(
        most,
        lambda workspace_id, held: (
            f"workspace {workspace_id!r} already has {held} {what} on this API process ({setting}): {advice}"
        ),
    )


@contextmanager
def holding(*places: tuple[Slots, str]) -> Iterator[None]:
    """One place in each of `places` (slots, key) for the block, or none at all: the first that is full
    refuses with ResourceExhausted. Checked and taken with no await between, so on one event loop two
    callers cannot both take the last place."""
    for slots, key in places:
        slots.check(key)
    for slots, key in places:
        slots.held[key] += 1
    try:
        yield
    finally:
        for slots, key in places:
            slots.held[key] -= 1
            if not slots.held[key]:
                del slots.held[key]  # a key holding nothing is not kept: workspaces come and go
