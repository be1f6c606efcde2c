"""How every peerlog process logs: one format, so the worker's, the API's and its children's lines read alike.

Outside the import layers: the CLI and the API's child processes both use it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Literal

import orjson
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings

from services.settings_base import prefixed
from services.tracing import current_ids

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogSettings(BaseSettings):
    """How every process logs (`PEERLOG_LOG_`)."""

    model_config = prefixed("PEERLOG_LOG_")

    format: Literal["text", "json"] = Field(
        "text", description="json: one object a line, with the trace and span ids of the call or event being handled"
    )
    # refused at start: logging.basicConfig raised on an unknown name, after the settings had been accepted
    level: Literal["DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL"] = Field(
        "INFO", description="any case"
    )

    @field_validator("level", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value


class JsonFormatter(logging.Formatter):
    """One JSON object a line, with the trace and span ids of the call or event the line was logged in."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        ids = current_ids()
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line).decode()


def configure(settings: LogSettings | None = None) -> None:
    """Log as `settings` say (default: from the environment); a service passes the ones it checked at start."""
    settings = settings or LogSettings()
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if settings.format == "json" else logging.Formatter(FORMAT))
    logging.basicConfig(level=settings.level, handlers=[handler])
    # httpx logs every request's full URL at INFO: a webhook receiver's URL may hold its credentials
    # (user:password@, ?token=), which would reach the operator's log at every delivery
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
