"""How every peerlog process logs: one format, so the worker's, the API's and its children's lines read alike.

Outside the import layers, like services/config.py: the CLI and the API's child processes both use it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import orjson

from services.config import LogSettings
from services.tracing import current_ids

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object a line, with the trace and span ids of the call or event the line was logged in."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        ids = current_ids()
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line).decode()


def configure(settings: LogSettings | None = None) -> None:
    settings = settings or LogSettings()
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if settings.format == "json" else logging.Formatter(FORMAT))
    logging.basicConfig(level=settings.level.upper(), handlers=[handler])
