"""What can go wrong talking to a model. Each error names the stage; `outcome` labels it in metrics."""

from __future__ import annotations

# an error's text may quote what a server sent, and it is copied into dead-letter events
from services.llm.formats import storable


class ModelError(Exception):
    """Base for model-call failures. Its text is for the server's log; `public` is what a caller's reply or
    an event may carry: what a provider's server sent back can quote the operator's key, organisation or
    quota, so `public` leaves it out (`shown`)."""

    outcome = "error"

    def __init__(self, stage: str, message: str, public: str | None = None) -> None:
        super().__init__(storable(f"[{stage}] {message}"))
        self.stage = stage
        self.public = storable(f"[{stage}] {public}") if public is not None else str(self)


def shown(error: BaseException) -> str:
    """An error's text as a caller or the log of events may see it: a model error's `public` text."""
    return error.public if isinstance(error, ModelError) else str(error)


def _described(error: BaseException) -> str:
    """What failed, without what the server said: the error's kind, and its HTTP status if it had one."""
    status = getattr(error, "status_code", None)
    return f"{type(error).__name__} (HTTP {status})" if isinstance(status, int) else type(error).__name__


class ModelUnavailable(ModelError):
    """The server could not be reached or kept failing (timeouts, connection errors, 429, 5xx)."""

    outcome = "unavailable"

    def __init__(self, stage: str, attempts: int, last_error: BaseException) -> None:
        message = f"model unavailable after {attempts} attempt(s)"
        super().__init__(stage, f"{message}: {last_error}", f"{message}: {_described(last_error)}")
        self.attempts = attempts
        self.last_error = last_error


# how servers say a prompt is past the model's context (OpenAI, vLLM, llama.cpp, Ollama, Anthropic-compatible
# proxies); "max_tokens must be less than …" is a setting every call meets, not a prompt to shorten
_PAST_CONTEXT = (
    "context length",
    "context_length",
    "context window",
    "maximum context",
    "exceeds the available context",
    "prompt is too long",
    "input is too long",
    "too many tokens in the prompt",
    "must have less than",  # text-embeddings-inference: "`inputs` must have less than 512 tokens"
    "too large to process",  # llama.cpp's server
)


class ModelRequestRejected(ModelError):
    """The server refused the request itself (4xx other than 429); retrying would not help."""

    outcome = "rejected"

    def __init__(self, stage: str, status_code: int, body: str) -> None:
        rejected = f"request rejected with HTTP {status_code}"
        super().__init__(stage, f"{rejected}: {body[:500]}", f"{rejected}; the server's log has its reply")
        self.status_code = status_code
        self.body = body

    @property
    def too_long(self) -> bool:
        """Whether the server refused the prompt as past its context (not a key, a model name, credit or a
        max_tokens setting, which every request would meet): a 413, or a 400 whose reply says so."""
        said = self.body.lower()
        return self.status_code == 413 or (self.status_code == 400 and any(p in said for p in _PAST_CONTEXT))


class ModelOutputInvalid(ModelError):
    """The model's reply did not validate against the schema, even after one repair attempt."""

    outcome = "invalid_output"

    def __init__(self, stage: str, raw: str, error: str) -> None:
        super().__init__(stage, f"model output invalid: {error[:500]}")
        self.raw = raw
        self.error = error


class ModelOutputCut(ModelOutputInvalid):
    """The reply stopped at max_tokens before it was whole: asking the same again stops there again, so a
    caller that can ask for less (the deriver, in smaller pieces) does."""


class EmbeddingError(Exception):
    """An embedding model is missing, corrupt, or returned vectors of the wrong shape."""

    def __init__(self, message: str) -> None:
        super().__init__(storable(message))


class RerankError(Exception):
    """The re-ranking model is missing or corrupt."""


class TokenizerUnavailable(Exception):
    """The offline tokenizer ranks could not be built or failed their hash check."""
