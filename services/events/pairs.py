"""An (observer, observed) pair of a workspace, as one derivation of its store."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pair:
    """A pair's store as one derivation of it: everything derived for it carries that label."""

    workspace_id: str
    observer_id: str
    observed_id: str
    derivation: str = ""  # the stored label: "" is the original live derivation

    def fields(self) -> dict:
        return {
            "workspace_id": self.workspace_id,
            "observer_id": self.observer_id,
            "observed_id": self.observed_id,
            "derivation": self.derivation,
        }
