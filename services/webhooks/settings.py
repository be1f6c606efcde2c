"""The webhook settings: where deliveries may go, and how many webhooks one workspace may have."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from services.settings_base import prefixed


class WebhookSettings(BaseSettings):
    model_config = prefixed("PEERLOG_WEBHOOK_")

    # off: a webhook URL must resolve to public addresses only, at registration and at every connection
    # (a receiver on a private network, or the tests' local one, needs it on)
    allow_private_targets: bool = Field(
        False, description="allow webhook URLs on loopback, private, link-local and other non-public addresses"
    )
    # each webhook is a delivery loop with a Kafka consumer, a thread and a connection pool in `peerlog webhooks`
    max_per_workspace: int = Field(
        20,
        ge=1,
        description="webhooks one workspace may have; CreateWebhook past it is RESOURCE_EXHAUSTED",
    )
    # a retry waits up to a delivery attempt's 10 s on the workspace's own receiver, holding a call's place
    retries_per_workspace: int = Field(
        2,
        ge=1,
        description="RetryWebhookDeadLetter calls of one workspace one API process runs at once; one more is "
        "RESOURCE_EXHAUSTED",
    )
