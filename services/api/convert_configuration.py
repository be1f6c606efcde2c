"""Configuration levels between protos and the domain."""

from __future__ import annotations

from pydantic import ValidationError

from peerlog.v1 import configuration_pb2
from services.api import validation as v
from services.errors import InvalidArgument
from services.events import SETTINGS, ConfigLevel, Configuration, Effective

LEVELS = {
    level: configuration_pb2.ConfigurationLevel.Value(f"CONFIGURATION_LEVEL_{level.name}") for level in ConfigLevel
}


def configuration(m: configuration_pb2.Configuration, field: str = "configuration") -> Configuration:
    """The level a request sets (unset fields inherit); an out-of-range value is INVALID_ARGUMENT."""
    values = {name: getattr(m, name) for name in SETTINGS if m.HasField(name)}
    for name, value in values.items():
        if isinstance(value, str):  # instructions: stored as jsonb, which cannot hold a NUL (the projector
            v.check_no_nul(f"{field}.{name}", value)  # quarantined such a level after the API accepted it)
    try:
        return Configuration(**values)
    except ValidationError as exc:
        raise InvalidArgument(
            "; ".join(f"{field}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        ) from None


def optional_configuration(m, field: str) -> Configuration | None:
    """The message's `configuration` field, None when unset."""
    return configuration(m.configuration, field) if m.HasField("configuration") else None


def effective(e: Effective) -> configuration_pb2.EffectiveConfiguration:
    return configuration_pb2.EffectiveConfiguration(
        values=configuration_pb2.Configuration(**{n: r.value for n, r in e.settings.items()}),
        levels={n: LEVELS[r.level] for n, r in e.settings.items()},
    )
