"""The structured output the local-model tests ask for: facts about people, no other keys allowed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Fact(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subject: str
    statement: str


class Facts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    facts: list[Fact]
