"""Retry: derive again the batches the live deriver dead-lettered, into each pair's current derivation.

The live deriver parks a batch the model keeps failing on and never tries it again (a retry loop on a
broken prompt or model would stall the pair). Once the cause is fixed, `peerlog derivations retry`
brings each pair's current derivation up to date: it derives what that derivation lacks (`missing`),
which for a pair whose batches all finished is nothing, and is otherwise its parked messages.
"""

from __future__ import annotations

from collections.abc import Callable

from projections.run_lock import exclusive
from services.events import ORIGINAL, DerivationPromoted
from services.rederivation.rederive import DerivationScope, Rederivation, Report, Seen, finished, perceived


def by_current_label(history: dict[str, list[Seen]]) -> dict[str, dict[str, list[Seen]]]:
    """The pairs' histories grouped by the derivation current at the end of each ("" before any promotion)."""
    groups: dict[str, dict[str, list[Seen]]] = {}
    for key, seen in history.items():
        label = next((e.derivation for e in reversed(seen) if isinstance(e, DerivationPromoted)), "")
        groups.setdefault(label, {})[key] = seen
    return groups


async def retry(
    settings, scope: DerivationScope, model: str = "", progress: Callable[[str], None] = print
) -> list[Report]:
    """Derive, with `model` (default: the deriver's), what each pair's current derivation lacks in scope."""
    reports = []
    async with exclusive(settings, scope.workspace_id) as lock:
        history, logs = perceived(settings, scope), finished(settings, scope)  # read once for every group
        for label, pairs in sorted(by_current_label(history).items()):
            # into the current derivation, messages no deriver counted: evidence for a client's fact too
            async with Rederivation(settings, lock, label or ORIGINAL, model, progress, reinforce_clients=True) as run:
                await run.catch_up(scope, "retry", pairs, logs)
            reports.append(run.report())
    return reports
