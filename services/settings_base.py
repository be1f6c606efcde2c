"""What every component's settings class shares: its own env prefix, unknown variables ignored, frozen.

Outside the import layers: the bus, the projections and the processors each declare their settings with it.
"""

from __future__ import annotations

from typing import Any

from pydantic_settings import SettingsConfigDict


def prefixed(prefix: str, **extra: Any) -> SettingsConfigDict:
    """The model_config of a settings class that reads the variables starting with `prefix`."""
    return SettingsConfigDict(env_prefix=prefix, extra="ignore", frozen=True, **extra)
