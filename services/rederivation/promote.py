"""Promotion: make a derivation the current one of a pair (or of every pair of a workspace), rewriting nothing.

A DerivationPromoted on the pair's perceived partition moves the pointer at one point of the pair's
history: the live deriver derives what it has pending into the old derivation, and everything perceived
after it into the new one. What the new derivation lacks from before that point is derived here, as
`peerlog rederive` would: first the bulk, while reads still serve the old derivation, then the few
messages perceived between that pass and the promotion. So the promoted store has no gap and no overlap.
"""

from __future__ import annotations

from collections.abc import Callable

from projections.run_lock import exclusive
from services.events import ORIGINAL, DerivationPromoted, ProducerInfo
from services.events.perception import pair_of
from services.rederivation.rederive import (
    NAME,
    DerivationScope,
    Finished,
    Rederivation,
    Report,
    Seen,
    finished,
    perceived,
)

PRODUCER = ProducerInfo(component="promote", version="0.1.0")


class PromotionRefused(ValueError):
    """The catch-up left messages underived: the promotion was not appended."""


def check_promotable(name: str) -> None:
    if name != ORIGINAL and not NAME.fullmatch(name):
        raise ValueError(f"derivation name {name!r} must match {NAME.pattern} or be {ORIGINAL!r}")


def check_holds(
    name: str, label: str, scope: DerivationScope, history: dict[str, list[Seen]], logs: Finished, from_scratch: bool
) -> None:
    """ValueError for a promotion that would be permanent and almost surely a mistake: over a scope that has
    perceived nothing (a pair named the wrong way round), or to a derivation that holds nothing there (a
    misspelt name), which would derive the whole history with the deriver's model and switch reads to it."""
    where = f"({scope.observer_id}, {scope.observed_id})" if scope.observer_id else f"workspace {scope.workspace_id!r}"
    if not history:
        raise ValueError(
            f"{where} has perceived nothing, so there is nothing to promote over; check --pair OBSERVER/OBSERVED"
        )
    if name != ORIGINAL and not from_scratch and not any(logs.of(label, key)[0] for key in history):
        raise ValueError(
            f"derivation {name!r} holds nothing in {where}: promoting it would derive the whole history with the "
            f"deriver's model. Derive into it first (`peerlog rederive --name {name}`), check the name, or pass "
            "--from-scratch"
        )


def promotions(keys, label: str, reason: str) -> list[DerivationPromoted]:
    return [DerivationPromoted(**pair_of(k), derivation=label, reason=reason, producer=PRODUCER) for k in sorted(keys)]


async def promote(
    settings,
    name: str,
    scope: DerivationScope,
    model: str = "",
    reason: str = "",
    progress: Callable[[str], None] = print,
    from_scratch: bool = False,
) -> Report:
    """Make derivation `name` current for the pair in `scope` (or for every pair the workspace has perceived
    so far) and derive into it, with `model`, whatever it lacks from before the promotion. The promotion is
    permanent: the caller first checks that the scope exists (rederive.check_scope, as the command does).
    Refused for a name that holds nothing in scope unless `from_scratch` (check_holds)."""
    check_promotable(name)
    async with (
        exclusive(settings, scope.workspace_id) as lock,
        Rederivation(settings, lock, name, model, progress) as run,
    ):
        history, logs = perceived(settings, scope), finished(settings, scope)
        check_holds(name, run.label, scope, history, logs, from_scratch)
        await run.catch_up(scope, f"promote:{name}", history, logs)  # the bulk, before reads switch over
        if run.parked:  # reads would switch to a derivation without those messages' facts
            raise PromotionRefused(
                f"{len(run.parked)} messages could not be derived into {name!r} (the model kept failing; "
                "GetProcessingStatus lists them as dead-lettered): nothing was promoted. Fix the model (--model) "
                "and run the promote again; it carries on where this one stopped"
            )
        keys = {f"{scope.workspace_id}/{scope.observer_id}/{scope.observed_id}"} if scope.observer_id else run.pairs
        promoted = promotions(keys, run.label, reason)
        if promoted:
            await run.append(promoted)
        progress(f"{len(promoted)} pairs now read derivation {name!r}")
        progress(
            "observations clients wrote are in every derivation; the old derivation's dream conclusions stay "
            "with it (reads that name it show them) and the scheduler dreams over the new one (README, Promotion)"
        )
        await run.catch_up(scope, f"promote:{name}")  # what was perceived between the first pass and the promotion
    return run.report()
