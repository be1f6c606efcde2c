"""The provenance rule for derived observations, shared by the writers (the dreamer's tools) and the
projector, so a rejected write at run time is rejected the same way on replay."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from services.events.observations import Level

# a contradiction flags observations that clash, so it needs two of them, like a pattern
MIN_PREMISES = {Level.DEDUCTIVE: 1, Level.INDUCTIVE: 2, Level.CONTRADICTION: 2}


@dataclass(frozen=True)
class PremiseState:
    """What the rule needs to know about a cited observation."""

    observer_id: str
    observed_id: str
    live: bool  # neither superseded nor deleted


def confidence_for(premise_count: int) -> str:
    """An inductive pattern's confidence from how many observations support it."""
    return "high" if premise_count >= 5 else "medium" if premise_count >= 3 else "low"


def premise_problems(
    level: Level, observer_id: str, observed_id: str, premise_ids: Sequence[str], known: Mapping[str, PremiseState]
) -> list[str]:
    """Why a derived observation of (observer, observed) may not cite `premise_ids` (empty: it may).

    `known` holds the cited observations that exist, anywhere in the workspace (a dream's check, which can
    say whose store a premise is in) or in the pair's store alone (the projector's: where another pair's
    premise stands depends on the order the pairs' partitions were read, and a rebuild must give the same
    reason as the live projector did).
    """
    if level not in MIN_PREMISES:
        return []
    problems = []
    distinct = list(dict.fromkeys(premise_ids))
    if len(distinct) < MIN_PREMISES[level]:
        problems.append(
            f"a {level.value} observation must cite at least {MIN_PREMISES[level]} distinct "
            f"premise(s); it cites {len(distinct)}"
        )
    for pid in distinct:
        state = known.get(pid)
        if state is None:
            problems.append(f"premise {pid!r} is not an observation of ({observer_id}, {observed_id})")
        elif (state.observer_id, state.observed_id) != (observer_id, observed_id):
            problems.append(
                f"premise {pid!r} belongs to the store of ({state.observer_id}, {state.observed_id}), "
                f"not ({observer_id}, {observed_id})"
            )
        elif not state.live:
            problems.append(f"premise {pid!r} was superseded or deleted; cite its replacement")
    return problems
