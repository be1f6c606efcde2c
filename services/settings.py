"""All settings, composed from the per-component classes. Nothing else reads the environment."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from services.config import (
    ApiSettings,
    AuthSettings,
    DatabaseSettings,
    DialecticSettings,
    DreamSettings,
    KafkaSettings,
    ProjectorSettings,
    WorkerSettings,
)
from services.deriver.settings import DeriverSettings
from services.llm.settings import EmbeddingSettings, LlmSettings
from services.summarizer.settings import SummarizerSettings


class Settings(BaseSettings):
    """All settings, composed from the per-component classes."""

    model_config = SettingsConfigDict(env_prefix="PEERLOG_", extra="ignore", frozen=True)

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    projector: ProjectorSettings = Field(default_factory=ProjectorSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    # NoDecode: PEERLOG_AUTH is the on/off switch, not this section as JSON (see _auth_switch)
    auth: Annotated[AuthSettings, NoDecode] = Field(default_factory=AuthSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    deriver: DeriverSettings = Field(default_factory=DeriverSettings)
    summarizer: SummarizerSettings = Field(default_factory=SummarizerSettings)
    dream: DreamSettings = Field(default_factory=DreamSettings)
    dialectic: DialecticSettings = Field(default_factory=DialecticSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)

    @field_validator("auth", mode="before")
    @classmethod
    def _auth_switch(cls, value):
        # the env source hands this field PEERLOG_AUTH's text ("on"/"off"); AuthSettings reads it itself
        return AuthSettings() if isinstance(value, str) else value
