"""Scopes: named groups of a workspace's sessions that bound what a read recalls.

On the directory topic, keyed by workspace: one partition holds every change of a workspace's scopes
in order, which is the order the projection numbers them in (as_of reads take the latest change of
each session at a time)."""

from __future__ import annotations

from pydantic import Field

from services.events.base import Event


class ScopeCreated(Event):
    """A scope was created, with its first sessions (possibly none)."""

    scope_id: str
    name: str = ""
    session_ids: tuple[str, ...] = Field(default_factory=tuple)


class ScopeSessionsAdded(Event):
    """Sessions were put into a scope."""

    scope_id: str
    session_ids: tuple[str, ...]


class ScopeSessionsRemoved(Event):
    """Sessions were taken out of a scope; reads after it no longer recall them through it."""

    scope_id: str
    session_ids: tuple[str, ...]
