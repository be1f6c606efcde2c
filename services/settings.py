"""All settings, composed from the per-component classes. Nothing else reads the environment.

Each component declares its own class in its own package (services/bus/settings.py, projections/settings.py, …);
only the composition roots (the CLI, the worker, the API and the webhook process) build the whole `Settings`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode

from projections.settings import DatabaseSettings, ProjectorSettings
from services.api.settings import ApiSettings, AuthSettings
from services.bus.settings import KafkaSettings
from services.deriver.settings import DeriverSettings
from services.dialectic.settings import DialecticSettings
from services.dreamer.settings import DreamSettings
from services.events import Configuration
from services.llm.settings import EmbeddingSettings, LlmSettings, RerankSettings
from services.logs import LogSettings
from services.settings_base import prefixed
from services.summarizer.settings import SummarizerSettings
from services.tracing import TracingSettings
from services.webhooks.settings import WebhookSettings
from services.worker.settings import WorkerSettings


class ReasoningSettings(BaseSettings):
    """The global level of the configuration hierarchy (workspace, session and message override it)."""

    model_config = prefixed("PEERLOG_REASONING_")

    enabled: bool = Field(True, description="derive observations and summaries at all")
    observe_me: bool = Field(True, description="a peer's own messages build its self-model unless it says")
    observe_others: bool = Field(False, description="a member models the others unless it says")
    summaries: bool = True
    dreams: bool = True
    peer_card: bool = True
    deriver_instructions: str = Field("", description="added to the deriver's prompt")
    dialectic_instructions: str = Field("", description="added to the dialectic's prompt")


class Settings(BaseSettings):
    """All settings, composed from the per-component classes."""

    model_config = prefixed("PEERLOG_")

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
    rerank: RerankSettings = Field(default_factory=RerankSettings)
    webhook: WebhookSettings = Field(default_factory=WebhookSettings)
    reasoning: ReasoningSettings = Field(default_factory=ReasoningSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)

    def configuration(self) -> Configuration:
        """The global level: every setting, from the environment."""
        r = self.reasoning
        return Configuration(
            reasoning=r.enabled,
            observe_me=r.observe_me,
            observe_others=r.observe_others,
            summaries=r.summaries,
            summary_short_every=self.summarizer.short_every,
            summary_long_every=self.summarizer.long_every,
            dreams=r.dreams,
            dream_threshold=self.dream.threshold,
            peer_card=r.peer_card,
            deriver_instructions=r.deriver_instructions,
            dialectic_instructions=r.dialectic_instructions,
        )

    @field_validator("auth", mode="before")
    @classmethod
    def _auth_switch(cls, value):
        # the env source hands this field PEERLOG_AUTH's text ("on"/"off"); AuthSettings reads it itself
        return AuthSettings() if isinstance(value, str) else value
