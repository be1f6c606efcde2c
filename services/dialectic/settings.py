"""Chat's reasoning levels and limits (`PEERLOG_DIALECTIC_`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from pydantic import Field
from pydantic_settings import BaseSettings

from services.settings_base import prefixed

Level = Literal["minimal", "low", "medium", "high", "max"]
LEVELS: tuple[str, ...] = get_args(Level)


@dataclass(frozen=True)
class LevelPolicy:
    """What one reasoning level may do: its model stage, tools, tool-round cap and prefetch size."""

    level: str
    stage: str
    tool_rounds: int
    prefetch: int  # per kind: this many explicit and this many derived observations
    search_only: bool  # only the search tools (services/dialectic/loop.py SEARCH_TOOLS)


class DialecticSettings(BaseSettings):
    """Chat's levels and limits. Each level's model is LLM stage dialectic_<level>."""

    model_config = prefixed("PEERLOG_DIALECTIC_")

    # the reference system's defaults: low really does get more rounds than medium
    rounds_minimal: int = Field(1, ge=0, description="most tool rounds at level minimal")
    rounds_low: int = Field(5, ge=0)
    rounds_medium: int = Field(2, ge=0)
    rounds_high: int = Field(4, ge=0)
    rounds_max: int = Field(10, ge=0)
    prefetch_minimal: int = Field(10, ge=0, description="explicit and derived observations prefetched, each")
    prefetch: int = Field(25, ge=0, description="the same for every other level")
    history_tokens: int = Field(2000, ge=0, description="most tokens of recent session history in the prompt")
    deadline_s: float = Field(120.0, gt=0, description="hard limit per call (a shorter gRPC deadline wins)")
    token_budget: int = Field(
        32_000, ge=1000, description="most prompt tokens per call, summed over model calls; tools stop first"
    )
    tool_result_limit: int = Field(20, ge=1, le=100, description="most rows one tool call returns")
    tool_result_chars: int = Field(6000, ge=500, description="longest tool result shown to the model")

    def level(self, name: str) -> LevelPolicy:
        """The policy of a level (one of LEVELS)."""
        if name not in LEVELS:
            raise ValueError(f"unknown reasoning level {name!r}; expected one of {', '.join(LEVELS)}")
        prefetch = self.prefetch_minimal if name == "minimal" else self.prefetch
        return LevelPolicy(name, f"dialectic_{name}", getattr(self, f"rounds_{name}"), prefetch, name == "minimal")
