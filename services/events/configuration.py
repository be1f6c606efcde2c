"""Reasoning settings at four levels (message > session > workspace > global) and the events that set them.

A level's `Configuration` names only what it overrides: a field left None inherits from the level below.
Each Set* call replaces its level's whole configuration, so one event says everything about that level.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from services.events.base import Event

INSTRUCTIONS_MAX = 2000  # characters; they ride on every message of the level, and into prompts


class Configuration(BaseModel):
    """The reasoning settings one level sets; None inherits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reasoning: bool | None = None  # derive observations at all (off: no perceptions, no summaries)
    observe_me: bool | None = None  # default when neither member nor peer says; false on a message wins
    observe_others: bool | None = None  # default when the member does not say
    summaries: bool | None = None
    summary_short_every: int | None = Field(None, ge=1)  # messages between short summaries
    summary_long_every: int | None = Field(None, ge=1)  # messages between long summaries
    dreams: bool | None = None
    dream_threshold: int | None = Field(None, ge=1)  # new explicit observations that make a dream due
    peer_card: bool | None = None
    deriver_instructions: str | None = Field(None, max_length=INSTRUCTIONS_MAX)
    dialectic_instructions: str | None = Field(None, max_length=INSTRUCTIONS_MAX)


SETTINGS: tuple[str, ...] = tuple(Configuration.model_fields)


class ConfigLevel(StrEnum):
    GLOBAL = "global"
    WORKSPACE = "workspace"
    SESSION = "session"
    MESSAGE = "message"


@dataclass(frozen=True, slots=True)
class Resolved:
    """One setting's effective value and the level it came from."""

    value: bool | int | str
    level: ConfigLevel


@dataclass(frozen=True)
class Effective:
    """Every setting resolved: `effective[name]` is what applies, `settings[name].level` where it was set."""

    settings: dict[str, Resolved]

    def __getitem__(self, name: str):
        return self.settings[name].value


@lru_cache(maxsize=4096)  # the router and the summarizer resolve per message; the levels seldom change
def resolve(
    global_: Configuration,
    workspace: Configuration | None = None,
    session: Configuration | None = None,
    message: Configuration | None = None,
) -> Effective:
    """The effective settings: the highest level that sets a field wins. `global_` must set every field."""
    levels = (
        (ConfigLevel.MESSAGE, message),
        (ConfigLevel.SESSION, session),
        (ConfigLevel.WORKSPACE, workspace),
        (ConfigLevel.GLOBAL, global_),
    )
    out = {}
    for name in SETTINGS:
        level, value = next(
            ((lv, getattr(c, name)) for lv, c in levels if c is not None and getattr(c, name) is not None),
            (ConfigLevel.GLOBAL, None),
        )
        if value is None:
            raise ValueError(f"the global configuration must set {name!r}")
        out[name] = Resolved(value=value, level=level)
    return Effective(settings=out)


def prompt_addition(instructions: str) -> str:
    """Custom instructions as the deriver and the dialectic add them to a system prompt (none: nothing).
    Declared here, beside the setting, so both stages word them the same."""
    return f"\n\nAdditional instructions for this memory:\n{instructions}" if instructions.strip() else ""


class WorkspaceConfigured(Event):
    """A workspace's configuration was set (replacing the previous one). On the directory topic: the
    workspace's own history; the API stamps it on each message it accepts (MessageAppended), so the
    session processors apply it in their own log order."""

    configuration: Configuration


class MessageConfigured(Event):
    """A message's level was set after it was accepted (replacing the one it came with). On the session's
    topic, after the message: the router had already routed it under its old level, so this governs what
    is read of it from now (GetEffectiveConfiguration; as_of before it still shows the old level)."""

    key_fields: ClassVar[tuple[str, ...]] = ("workspace_id", "session_id")

    session_id: str
    message_id: str
    configuration: Configuration


class SessionConfigured(Event):
    """A session's configuration was set (replacing the previous one). On the session's topic, so the
    router and the summarizer meet it in order with the messages it governs."""

    key_fields: ClassVar[tuple[str, ...]] = ("workspace_id", "session_id")

    session_id: str
    configuration: Configuration
