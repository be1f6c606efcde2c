"""What every component's settings class shares: its own env prefix, unknown variables ignored, frozen, and
a refusal that names the variables.

Outside the import layers: the bus, the projections and the processors each declare their settings with it.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsConfigDict


def prefixed(prefix: str, **extra: Any) -> SettingsConfigDict:
    """The model_config of a settings class that reads the variables starting with `prefix`."""
    return SettingsConfigDict(env_prefix=prefix, extra="ignore", frozen=True, **extra)


def variables_said(err: ValidationError, prefix: str) -> str:
    """A settings class's refusal in one line naming the variables ('PEERLOG_API_PORT: Input should be less
    than or equal to 65535'), never their values, which may be secrets. `prefix`: the class's env prefix
    (empty when unknown: the field is named as it is, rather than as a variable nobody set)."""
    said = []
    for e in err.errors():
        loc = [str(part).upper() for part in e["loc"]]
        # a validation_alias (PEERLOG_AUTH, under Settings' `auth`) is already the whole variable's name
        aliases = [part for part in loc if part.startswith("PEERLOG_")]
        name = aliases[-1] if aliases else prefix + "_".join(loc)
        said.append((f"{name}: " if loc else "") + e["msg"].removeprefix("Value error, "))
    return "; ".join(said)
