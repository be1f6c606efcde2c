"""What can go wrong talking to a model. Each error names the stage; `outcome` labels it in metrics."""

from __future__ import annotations

# an error's text may quote what a server sent, and it is copied into dead-letter events
from services.llm.formats import storable


class ModelError(Exception):
    """Base for model-call failures."""

    outcome = "error"

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(storable(f"[{stage}] {message}"))
        self.stage = stage


class ModelUnavailable(ModelError):
    """The server could not be reached or kept failing (timeouts, connection errors, 429, 5xx)."""

    outcome = "unavailable"

    def __init__(self, stage: str, attempts: int, last_error: BaseException) -> None:
        super().__init__(stage, f"model unavailable after {attempts} attempt(s): {last_error}")
        self.attempts = attempts
        self.last_error = last_error


class ModelRequestRejected(ModelError):
    """The server refused the request itself (4xx other than 429); retrying would not help."""

    outcome = "rejected"

    def __init__(self, stage: str, status_code: int, body: str) -> None:
        super().__init__(stage, f"request rejected with HTTP {status_code}: {body[:500]}")
        self.status_code = status_code
        self.body = body


class ModelOutputInvalid(ModelError):
    """The model's reply did not validate against the schema, even after one repair attempt."""

    outcome = "invalid_output"

    def __init__(self, stage: str, raw: str, error: str) -> None:
        super().__init__(stage, f"model output invalid: {error[:500]}")
        self.raw = raw
        self.error = error


class EmbeddingError(Exception):
    """An embedding model is missing, corrupt, or returned vectors of the wrong shape."""

    def __init__(self, message: str) -> None:
        super().__init__(storable(message))


class RerankError(Exception):
    """The re-ranking model is missing or corrupt."""


class TokenizerUnavailable(Exception):
    """The offline tokenizer ranks could not be built or failed their hash check."""
